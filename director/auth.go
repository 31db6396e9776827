package director

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/cpilab/cpilab/rt"
)

// Scopes the API knows. Admin can do everything; Read every GET. The
// dynamic-disk scopes exist under upstream's names (ScopeDisksUpdate,
// ScopeDisksDelete) and the RFC's (ScopeRFC*); a token holding only
// dynamic-disk scopes can do nothing else than those operations and read its
// own tasks (403 otherwise).
const (
	ScopeAdmin = "bosh.admin"
	ScopeRead  = "bosh.read"
	// Upstream names: update covers provide, create, attach, detach and
	// list; delete covers delete and list.
	ScopeDisksUpdate = "bosh.dynamic_disks.update"
	ScopeDisksDelete = "bosh.dynamic_disks.delete"
	// RFC names: provide needs create and attach.
	ScopeRFCCreate = "bosh.dynamic-disks.create"
	ScopeRFCAttach = "bosh.dynamic-disks.attach"
	ScopeRFCDetach = "bosh.dynamic-disks.detach"
	ScopeRFCList   = "bosh.dynamic-disks.list"
	ScopeRFCDelete = "bosh.dynamic-disks.delete"
)

// User is a local user.
type User struct {
	Name     string   `json:"name" yaml:"name"`
	Password string   `json:"password" yaml:"password"`
	Scopes   []string `json:"scopes" yaml:"scopes"`
}

// AuthConfig configures authentication.
type AuthConfig struct {
	// Users are the local users; they log in with basic auth or get a
	// token from POST /oauth/token (grant_type=password, or
	// client_credentials with client_id/client_secret).
	Users []User
	// SigningKey signs bearer tokens (HS256). Default: 32 random bytes,
	// so tokens die with the process.
	SigningKey []byte
	// TokenTTL is a token's lifetime. Default 1 h.
	TokenTTL time.Duration
	// Runtime is the clock tokens are issued and checked on. Default
	// rt.Real(0).
	Runtime rt.Runtime
}

// Auth checks credentials and issues tokens.
type Auth struct {
	users map[string]User
	key   []byte
	ttl   time.Duration
	r     rt.Runtime
}

// NewAuth returns an Auth for cfg.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	a := &Auth{users: map[string]User{}, key: cfg.SigningKey, ttl: cfg.TokenTTL, r: cfg.Runtime}
	if a.r == nil {
		a.r = rt.Real(0)
	}
	if a.ttl <= 0 {
		a.ttl = time.Hour
	}
	if len(a.key) == 0 {
		a.key = make([]byte, 32)
		if _, err := rand.Read(a.key); err != nil {
			return nil, fmt.Errorf("director: token key: %w", err)
		}
	}
	for _, u := range cfg.Users {
		if u.Name == "" {
			return nil, errors.New("director: a user has no name")
		}
		a.users[u.Name] = u
	}
	return a, nil
}

// Principal is an authenticated caller.
type Principal struct {
	Name   string
	Scopes []string
}

// Has reports whether p holds scope.
func (p Principal) Has(scope string) bool { return slices.Contains(p.Scopes, scope) }

// any reports whether p holds one of scopes.
func (p Principal) any(scopes ...string) bool {
	for _, s := range scopes {
		if p.Has(s) {
			return true
		}
	}
	return false
}

type claims struct {
	Scope []string `json:"scope"`
	jwt.RegisteredClaims
}

const tokenIssuer = "cpilab-director"

// Token issues a bearer token for a local user.
func (a *Auth) Token(user, password string) (string, Principal, error) {
	u, ok := a.users[user]
	if !ok || subtle.ConstantTimeCompare([]byte(u.Password), []byte(password)) != 1 {
		return "", Principal{}, errBadCredentials
	}
	return a.Issue(Principal{Name: u.Name, Scopes: u.Scopes})
}

// Issue signs a token for p (tests and tools use it to mint scoped tokens).
func (a *Auth) Issue(p Principal) (string, Principal, error) {
	now := a.r.Now()
	c := claims{Scope: p.Scopes, RegisteredClaims: jwt.RegisteredClaims{
		Subject: p.Name, Issuer: tokenIssuer, IssuedAt: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(a.ttl)),
	}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(a.key)
	return s, p, err
}

var errBadCredentials = errors.New("invalid credentials")

// authenticate returns the caller of r: a bearer token or basic auth.
func (a *Auth) authenticate(r *http.Request) (Principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return Principal{}, errors.New("no credentials")
	}
	if user, pass, ok := r.BasicAuth(); ok {
		u, ok := a.users[user]
		if !ok || subtle.ConstantTimeCompare([]byte(u.Password), []byte(pass)) != 1 {
			return Principal{}, errBadCredentials
		}
		return Principal{Name: u.Name, Scopes: u.Scopes}, nil
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(h, "bearer ")
	}
	if !ok {
		return Principal{}, errors.New("unsupported Authorization scheme")
	}
	var c claims
	_, err := jwt.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return a.key, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(tokenIssuer), jwt.WithTimeFunc(a.r.Now),
		jwt.WithExpirationRequired())
	if err != nil {
		return Principal{}, fmt.Errorf("invalid token: %w", err)
	}
	return Principal{Name: c.Subject, Scopes: c.Scope}, nil
}

// Permissions: which scopes allow what.
func canAdmin(p Principal) bool { return p.Has(ScopeAdmin) }
func canRead(p Principal) bool  { return p.any(ScopeAdmin, ScopeRead) }
func canProvide(p Principal) bool {
	return canAdmin(p) || p.Has(ScopeDisksUpdate) || (p.Has(ScopeRFCCreate) && p.Has(ScopeRFCAttach))
}
func canCreate(p Principal) bool { return p.any(ScopeAdmin, ScopeDisksUpdate, ScopeRFCCreate) }
func canAttach(p Principal) bool { return p.any(ScopeAdmin, ScopeDisksUpdate, ScopeRFCAttach) }
func canDetach(p Principal) bool { return p.any(ScopeAdmin, ScopeDisksUpdate, ScopeRFCDetach) }
func canDelete(p Principal) bool { return p.any(ScopeAdmin, ScopeDisksDelete, ScopeRFCDelete) }
func canList(p Principal) bool {
	return p.any(ScopeAdmin, ScopeRead, ScopeDisksUpdate, ScopeDisksDelete, ScopeRFCList)
}

// diskScoped reports whether p holds any dynamic-disk scope (it may then
// read its own tasks).
func diskScoped(p Principal) bool {
	return p.any(ScopeDisksUpdate, ScopeDisksDelete, ScopeRFCCreate, ScopeRFCAttach, ScopeRFCDetach, ScopeRFCList, ScopeRFCDelete)
}

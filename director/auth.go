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

// Scopes the API knows, as upstream's permission_authorizer.rb names them.
// Admin (or bosh.<director uuid>.admin) can do everything; Read (or
// bosh.<director uuid>.read) every GET except the dynamic disk list. Each
// dynamic-disk operation has its own scope; provide needs create and attach.
// A token holding only dynamic-disk scopes can do nothing else (401), but
// may read its own tasks unless Knobs.DiskScopesCannotReadTasks.
const (
	ScopeAdmin       = "bosh.admin"
	ScopeRead        = "bosh.read"
	ScopeDisksCreate = "bosh.dynamic-disks.create"
	ScopeDisksAttach = "bosh.dynamic-disks.attach"
	ScopeDisksDetach = "bosh.dynamic-disks.detach"
	ScopeDisksList   = "bosh.dynamic-disks.list"
	ScopeDisksDelete = "bosh.dynamic-disks.delete"
)

// DiskScopes are the five dynamic-disk scopes.
var DiskScopes = []string{ScopeDisksCreate, ScopeDisksAttach, ScopeDisksDetach, ScopeDisksList, ScopeDisksDelete}

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

// Permission is what a route needs, as upstream's permission_authorizer.rb
// names it (its director permissions).
type Permission string

// Permissions of the director's routes.
const (
	PermAdmin        Permission = "admin"
	PermRead         Permission = "read"
	PermListDisks    Permission = "list_dynamic_disks"
	PermCreateDisks  Permission = "create_dynamic_disks"
	PermAttachDisks  Permission = "attach_dynamic_disks"
	PermDetachDisks  Permission = "detach_dynamic_disks"
	PermDeleteDisks  Permission = "delete_dynamic_disks"
	PermProvideDisks Permission = "provide_dynamic_disks"
)

// expectedScopes lists the scope sets that grant perm on a director of
// the given UUID, in upstream's order: any one set, all of its scopes.
func expectedScopes(perm Permission, uuid string) [][]string {
	out := [][]string{{ScopeAdmin}, {"bosh." + uuid + ".admin"}}
	switch perm {
	case PermRead:
		out = append(out, []string{ScopeRead}, []string{"bosh." + uuid + ".read"})
	case PermListDisks:
		out = append(out, []string{ScopeDisksList})
	case PermCreateDisks:
		out = append(out, []string{ScopeDisksCreate})
	case PermAttachDisks:
		out = append(out, []string{ScopeDisksAttach})
	case PermDetachDisks:
		out = append(out, []string{ScopeDisksDetach})
	case PermDeleteDisks:
		out = append(out, []string{ScopeDisksDelete})
	case PermProvideDisks:
		out = append(out, []string{ScopeDisksCreate, ScopeDisksAttach})
	}
	return out
}

// granted reports whether p holds every scope of one of the sets.
func (p Principal) granted(sets [][]string) bool {
	for _, set := range sets {
		all := true
		for _, s := range set {
			all = all && p.Has(s)
		}
		if all {
			return true
		}
	}
	return false
}

// scopeError is upstream's 401 for a missing scope:
// {"code": 600000, "description": "Require one of the scopes: …"}.
func scopeError(sets [][]string) *Error {
	var parts []string
	for _, set := range sets {
		if len(set) > 1 {
			parts = append(parts, "("+strings.Join(set, " AND ")+")")
		} else {
			parts = append(parts, set[0])
		}
	}
	return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
		Message: "Require one of the scopes: " + strings.Join(parts, ", ")}
}

// diskScoped reports whether p holds any dynamic-disk scope (it may then
// read its own tasks, unless Knobs.DiskScopesCannotReadTasks).
func diskScoped(p Principal) bool { return p.any(DiskScopes...) }

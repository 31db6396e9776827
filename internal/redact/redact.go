// Package redact removes secrets from text cpilab prints: connection
// strings (a PostgreSQL URL's password, a ?password= query, a key=value
// DSN's password=…), bearer tokens, client secrets. Every log line, error
// and banner that shows a connection string or a credential-bearing text
// goes through it.
//
//	fmt.Printf("database: %s\n", redact.DSN(cfg.Database))
//	// postgres://cpilab:***@db:5432/director?sslmode=disable
//	return fmt.Errorf("connect: %s", redact.Text(err.Error(), password))
package redact

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Mask replaces every secret.
const Mask = "***"

// secretKeys are query and key=value parameter names whose values are
// secrets (compared case-insensitively).
var secretKeys = map[string]bool{
	"password": true, "pass": true, "passwd": true, "pwd": true, "sslpassword": true,
	"secret": true, "client_secret": true, "token": true, "access_token": true,
	"refresh_token": true, "id_token": true, "api_key": true, "apikey": true,
}

// IsSecretKey reports whether a parameter named k holds a secret.
func IsSecretKey(k string) bool { return secretKeys[strings.ToLower(k)] }

// DSN returns a connection string with every secret masked. It takes a
// URL (postgres://user:pw@host/db?password=pw&sslpassword=pw), a
// key=value DSN (host=h user=u password='p w' dbname=d), or any other
// text, in which it masks key=value secrets and URL user info it finds.
// What is not a secret is kept as written.
func DSN(s string) string {
	if strings.Contains(s, "://") {
		return urlsIn(s)
	}
	return keyValues(s)
}

var urlRE = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]*`)

// urlsIn masks every URL inside s, and key=value secrets around them.
func urlsIn(s string) string {
	s = urlRE.ReplaceAllStringFunc(s, oneURL)
	return keyValues(s)
}

func oneURL(s string) string {
	i := strings.Index(s, "://")
	scheme, rest := s[:i+3], s[i+3:]
	// User info: everything before the last @ of the authority.
	auth := rest
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		auth = rest[:j]
	}
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		if c := strings.Index(auth[:at], ":"); c >= 0 {
			rest = auth[:c] + ":" + Mask + rest[at:]
		}
	}
	// Query: secret values masked, the rest kept byte for byte.
	if q := strings.Index(rest, "?"); q >= 0 {
		end := len(rest)
		if h := strings.Index(rest[q:], "#"); h >= 0 {
			end = q + h
		}
		parts := strings.Split(rest[q+1:end], "&")
		for n, p := range parts {
			k, _, ok := strings.Cut(p, "=")
			if dk, err := url.QueryUnescape(k); err == nil {
				k = dk
			}
			if ok && IsSecretKey(k) {
				parts[n] = p[:strings.Index(p, "=")+1] + Mask
			}
		}
		rest = rest[:q+1] + strings.Join(parts, "&") + rest[end:]
	}
	return scheme + rest
}

// kvRE matches key=value where value is 'quoted' (with \' escapes),
// "quoted", or bare up to white space, & or ;.
var kvRE = regexp.MustCompile(`(?i)\b([a-z_]+)(\s*=\s*)('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s&;,"']*)`)

func keyValues(s string) string {
	return kvRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := kvRE.FindStringSubmatch(m)
		if !IsSecretKey(sub[1]) || sub[3] == Mask {
			return m
		}
		return sub[1] + sub[2] + Mask
	})
}

var bearerRE = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+`)

// Text masks, in free text such as an error from a library: every
// occurrence of each given secret (empty ones ignored, longest first),
// URL passwords and secret parameters (DSN), and Bearer/Basic
// credentials.
func Text(s string, secrets ...string) string {
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, Mask)
			if q := url.QueryEscape(sec); q != sec {
				s = strings.ReplaceAll(s, q, Mask)
			}
		}
	}
	s = bearerRE.ReplaceAllStringFunc(s, func(m string) string {
		f := strings.Fields(m)
		return f[0] + " " + Mask
	})
	return DSN(s)
}

// Error returns err with its text masked by Text(…, secrets…); errors.Is
// and errors.As still see err. nil stays nil.
func Error(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	return &redacted{msg: Text(err.Error(), secrets...), err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

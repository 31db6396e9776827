package cpisuite

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// A secret of the CPI's config: a credential the CPI must never print
// (secrets.not-printed). Every string under a key that names a credential
// is one, wherever it sits in the config; certify's embedded cloud plants a
// fresh random one in each credential field (the registry's password).
type secret struct {
	// Key is where the secret sits in the config ("cloud.properties.registry.password").
	Key string
	// forms are the texts that show it: as it is, base64 (standard, URL,
	// unpadded), hex, URL-escaped, and base64 of "user:secret" (an HTTP
	// basic-auth header) when the same object holds a user name.
	forms []string
}

// secretKey matches the config keys whose string values are credentials.
var secretKey = regexp.MustCompile(`(?i)(password|passwd|passphrase|secret|token|private_?key|access_?key|api_?key|credentials?)$`)

// userKey matches the keys of the user name beside a password.
var userKey = regexp.MustCompile(`(?i)^(user|username|user_name|client|client_id|access_key_id)$`)

// minSecretLen is the shortest value treated as a secret: a shorter one
// ("p", "admin") shows up in text by chance.
const minSecretLen = 8

// secretsOf returns the secrets of a CPI config file's JSON, sorted by key;
// a config that is not JSON has none that cpilab can find.
func secretsOf(config []byte) []secret {
	var v any
	if json.Unmarshal(config, &v) != nil {
		return nil
	}
	var out []secret
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			user := ""
			for k, x := range t {
				if s, ok := x.(string); ok && userKey.MatchString(k) {
					user = s
				}
			}
			for k, x := range t {
				p := strings.TrimPrefix(path+"."+k, ".")
				if s, ok := x.(string); ok && secretKey.MatchString(k) && len(s) >= minSecretLen {
					out = append(out, secret{Key: p, forms: secretForms(s, user)})
					continue
				}
				walk(p, x)
			}
		case []any:
			for _, x := range t {
				walk(path+"[]", x)
			}
		}
	}
	walk("", v)
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// configSecrets reads the secrets of the config file an argv passes with
// -configPath (none without one, or when it cannot be read: the CPI's own
// call then fails and says why).
func configSecrets(argv []string) []secret {
	i := slices.Index(argv, "-configPath")
	if i < 0 || i+1 >= len(argv) {
		return nil
	}
	b, err := os.ReadFile(argv[i+1])
	if err != nil {
		return nil
	}
	return secretsOf(b)
}

func secretForms(s, user string) []string {
	b := []byte(s)
	forms := []string{s,
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)), url.QueryEscape(s), url.PathEscape(s)}
	if user != "" {
		basic := []byte(user + ":" + s)
		forms = append(forms, base64.StdEncoding.EncodeToString(basic), url.UserPassword(user, s).String())
	}
	slices.Sort(forms)
	return slices.Compact(forms)
}

// leaks returns the keys of the secrets that text shows, in any form.
func leaks(secrets []secret, text []byte) []string {
	var keys []string
	for _, s := range secrets {
		for _, f := range s.forms {
			if bytes.Contains(text, []byte(f)) {
				keys = append(keys, s.Key)
				break
			}
		}
	}
	return keys
}

// redact replaces every form of every secret in text with [secret KEY], so
// that no report repeats what the CPI printed.
func redact(secrets []secret, text []byte) []byte {
	for _, s := range secrets {
		for _, f := range s.forms {
			text = bytes.ReplaceAll(text, []byte(f), []byte("[secret "+s.Key+"]"))
		}
	}
	return text
}

package cpisuite

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"
)

func TestSecretsOfAConfig(t *testing.T) {
	cfg := []byte(`{"cloud":{"plugin":"fakeiaas","properties":{
		"registry":{"endpoint":"http://127.0.0.1:1/registry","user":"cpilab","password":"0123456789abcdef"},
		"aws":{"access_key_id":"AKIAEXAMPLE","secret_access_key":"wJalrXUtnFEMI/K7MDENG","default_key_name":"bosh"},
		"short":{"password":"p"},
		"list":[{"api_token":"tok-123456789"}]}}}`)
	var keys []string
	for _, s := range secretsOf(cfg) {
		keys = append(keys, s.Key)
	}
	want := []string{"cloud.properties.aws.secret_access_key", "cloud.properties.list[].api_token", "cloud.properties.registry.password"}
	if !slices.Equal(keys, want) {
		t.Fatalf("secrets %v, want %v (a key name is no secret; a value shorter than 8 is not looked for)", keys, want)
	}
	secrets := secretsOf(cfg)
	basic := base64.StdEncoding.EncodeToString([]byte("cpilab:0123456789abcdef"))
	for _, text := range []string{
		"password is 0123456789abcdef",
		"MDEyMzQ1Njc4OWFiY2RlZg==",                // base64
		"3031323334353637383961626364656",         // hex (a prefix is not enough)
		"Authorization: Basic " + basic,           // basic auth
		"GET http://cpilab:0123456789abcdef@host", // URL credentials
		"secret=wJalrXUtnFEMI%2FK7MDENG",          // URL escaped
	} {
		got := leaks(secrets, []byte(text))
		if strings.HasPrefix(text, "3031") {
			if len(got) != 0 {
				t.Errorf("%q: leaks %v, want none (not the whole hex form)", text, got)
			}
			continue
		}
		if len(got) != 1 {
			t.Errorf("%q: leaks %v, want one secret", text, got)
		}
		if red := string(redact(secrets, []byte(text))); len(leaks(secrets, []byte(red))) != 0 || !strings.Contains(red, "[secret ") {
			t.Errorf("%q redacted as %q", text, red)
		}
	}
	if got := leaks(secrets, []byte("password=[REDACTED] user=cpilab key=bosh")); len(got) != 0 {
		t.Errorf("a redacted config leaks %v", got)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --users takes a JSON list of users with names, passwords and scopes, and
// says what is wrong with any other file.
func TestLoadUsers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	users, err := loadUsers(write("ok.json", `[{"name": "a", "password": "p", "scopes": ["bosh.admin"]}]`))
	if err != nil || len(users) != 1 || users[0].Name != "a" || users[0].Scopes[0] != "bosh.admin" {
		t.Fatalf("loadUsers: %+v, %v", users, err)
	}
	for file, says := range map[string]string{
		write("noscope.json", `[{"name": "a", "password": "p"}]`):              `user 1 ("a") needs`,
		write("typo.json", `[{"name": "a", "pasword": "p", "scopes": ["x"]}]`): "pasword",
		write("empty.json", `[]`):             "no users",
		write("object.json", `{"name": "a"}`): "JSON list",
		filepath.Join(dir, "missing.json"):    "missing.json",
	} {
		if _, err := loadUsers(file); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("loadUsers(%s): %v; want an error saying %q", filepath.Base(file), err, says)
		}
	}
}

package redact_test

import (
	"strings"
	"testing"

	"github.com/cpilab/cpilab/internal/redact"
)

// Every spelling of a PostgreSQL connection string keeps its password out
// and everything else in.
func TestDSNEveryForm(t *testing.T) {
	const pw = "s3cr3t-Pa55"
	for _, tc := range []struct{ in, want string }{
		{"postgres://cpilab:" + pw + "@db:5432/director", "postgres://cpilab:***@db:5432/director"},
		{"postgresql://cpilab:" + pw + "@db/director?sslmode=disable", "postgresql://cpilab:***@db/director?sslmode=disable"},
		{"postgres://cpilab@db/director?password=" + pw + "&sslmode=require", "postgres://cpilab@db/director?password=***&sslmode=require"},
		{"postgres://cpilab@db/director?sslmode=require&PASSWORD=" + pw, "postgres://cpilab@db/director?sslmode=require&PASSWORD=***"},
		{"postgres://cpilab@db/director?sslpassword=" + pw, "postgres://cpilab@db/director?sslpassword=***"},
		{"postgres://cpilab:p%40ss" + pw + "@db/director", "postgres://cpilab:***@db/director"},
		{"postgres://u:" + pw + "@h1:5432,h2:5433/d", "postgres://u:***@h1:5432,h2:5433/d"},
		{"host=db user=cpilab password=" + pw + " dbname=director", "host=db user=cpilab password=*** dbname=director"},
		{"host=db password='" + pw + " with space' dbname=director", "host=db password=*** dbname=director"},
		{`host=db password='it\'s ` + pw + `' dbname=d`, "host=db password=*** dbname=d"},
		{"host=db password = " + pw + " dbname=d", "host=db password = *** dbname=d"},
		{"user=cpilab Password=" + pw, "user=cpilab Password=***"},
		{"postgres://db/director", "postgres://db/director"},
		{"launch: database \"host=db password=" + pw + "\": want a URL", "launch: database \"host=db password=***\": want a URL"},
	} {
		got := redact.DSN(tc.in)
		if got != tc.want {
			t.Errorf("DSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, pw) {
			t.Errorf("DSN(%q) kept the password: %q", tc.in, got)
		}
	}
}

func TestTextMasksGivenSecretsAndCredentials(t *testing.T) {
	for _, tc := range []struct {
		in      string
		secrets []string
		want    string
	}{
		{"login failed for client_secret=abc&x=1", nil, "login failed for client_secret=***&x=1"},
		{"Authorization: Bearer eyJhbGciOi.J9.sig", nil, "Authorization: Bearer ***"},
		{"dial: password hunter2 rejected", []string{"hunter2"}, "dial: password *** rejected"},
		{"url token=a%2Fb leaked a/b", []string{"a/b"}, "url token=*** leaked ***"},
		{"nothing secret here", []string{""}, "nothing secret here"},
	} {
		if got := redact.Text(tc.in, tc.secrets...); got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

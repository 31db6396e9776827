// Package pgtest gives tests a fresh PostgreSQL database on the throw-away
// cluster that scripts/postgres.sh starts (make test does that and sets
// CPILAB_TEST_POSTGRES to its URL).
//
//	func TestX(t *testing.T) {
//		url := pgtest.URL(t) // a new, empty database, dropped after the test
//		…
//	}
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable holding the cluster's URL.
const EnvURL = "CPILAB_TEST_POSTGRES"

var seq atomic.Int64

// URL creates an empty database for t on the cluster at $CPILAB_TEST_POSTGRES
// and returns its URL; the database is dropped when t ends. Without the
// variable the test is skipped, except under CI (CI=true), where that is a
// set-up error and the test fails.
func URL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		msg := "PostgreSQL tests need " + EnvURL + ": run them with `make test`, or `scripts/postgres.sh run go test ./...`"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connecting to %s: %v", base, err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("t_%d_%d_%s", os.Getpid(), seq.Add(1), sanitize(t.Name()))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 30 {
			break
		}
	}
	return b.String()
}

package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director/store"
)

// A connection failure names the database but never its password, in any
// spelling of the connection string.
func TestOpenPostgresErrorsHoldNoPassword(t *testing.T) {
	const pw = "Sup3r-s3cret"
	for _, dsn := range []string{
		"postgres://cpilab:" + pw + "@127.0.0.1:1/director?connect_timeout=2",
		"postgres://cpilab@127.0.0.1:1/director?password=" + pw + "&connect_timeout=2",
		"host=127.0.0.1 port=1 user=cpilab password=" + pw + " dbname=director connect_timeout=2",
		"host=127.0.0.1 port=1 user=cpilab password='" + pw + "' dbname=director connect_timeout=2",
		"postgres://cpilab:" + pw + "@127.0.0.1:1/director?sslmode=bogus",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := store.OpenPostgres(ctx, store.PostgresConfig{URL: dsn})
		cancel()
		if err == nil {
			t.Fatalf("OpenPostgres(%q) succeeded against a closed port", dsn)
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("OpenPostgres error shows the password: %v", err)
		}
	}
}

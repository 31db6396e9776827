package launch

import (
	"strings"
	"testing"
)

// One database is one director, however its connection string is spelled;
// another database (or user) is another director; no password reaches a
// message.
func TestDirectorIdentityIgnoresTheDSNSpelling(t *testing.T) {
	const pw = "hunter2-XYZ"
	same := []string{
		"postgres://cpilab:" + pw + "@db:5432/director",
		"postgres://cpilab@db/director?password=" + pw,
		"postgresql://cpilab:other@db:5432/director?sslmode=disable",
		"postgres://cpilab@db:5432/director?sslmode=require&password=" + pw,
		"postgres://cpilab@db/director",
	}
	want := sharedUUID(same[0])
	for _, dsn := range same[1:] {
		if got := sharedUUID(dsn); got != want {
			t.Errorf("sharedUUID(%q) = %s, want %s (the same database)", dsn, got, want)
		}
	}
	for _, dsn := range []string{
		"postgres://cpilab@db/other",
		"postgres://someone@db/director",
		"postgres://cpilab@db:5433/director",
		"postgres://cpilab@db2/director",
	} {
		if sharedUUID(dsn) == want {
			t.Errorf("sharedUUID(%q) names the director of %q", dsn, same[0])
		}
	}
	for _, dsn := range []string{"host=db user=cpilab password=" + pw + " dbname=director", "mysql://root:" + pw + "@db/x"} {
		err := checkRole(&Config{Database: dsn})
		if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "***") {
			t.Errorf("checkRole(%q) = %v; want a refusal with the password masked", dsn, err)
		}
	}
}

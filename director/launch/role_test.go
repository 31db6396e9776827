package launch_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director/launch"
)

// An api or worker process without a shared database or cloud, an unknown
// role and a database that is not PostgreSQL are refused before anything
// starts, naming what is missing.
func TestRunRefusesRolesWithoutSharedStoreOrCloud(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  launch.Config
		is   error
		says string
	}{
		{"api without database", launch.Config{Role: launch.RoleAPI, CPIConfig: "cpi.json"}, launch.ErrRoleNeedsDatabase, "--database"},
		{"worker without cloud", launch.Config{Role: launch.RoleWorker, Database: "postgres://u@127.0.0.1:1/d"}, launch.ErrRoleNeedsCloud, "--cpi-config"},
		{"unknown role", launch.Config{Role: "scheduler"}, nil, `role "scheduler"`},
		{"not postgres", launch.Config{Database: "mysql://u@h/d"}, nil, "postgres://"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.DataDir, c.cfg.Out, c.cfg.Listen = t.TempDir(), io.Discard, "127.0.0.1:0"
			err := launch.Run(context.Background(), c.cfg)
			if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Run: %v; want an error naming %s", err, c.says)
			}
		})
	}
}

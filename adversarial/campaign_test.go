package adversarial

import (
	"context"
	"os"
	"testing"
)

func runAreas(t *testing.T, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = rep.WriteTable(os.Stderr)
	return rep
}

func TestFakeIaaSQuick(t *testing.T) {
	runAreas(t, Config{Seed: 3, Scale: ScaleShort, Areas: []string{AreaFakeIaaS}})
}

func TestCPIQuick(t *testing.T) {
	runAreas(t, Config{Seed: 3, Scale: ScaleShort, Areas: []string{AreaCPI}})
}

func TestSFTPQuick(t *testing.T) {
	runAreas(t, Config{Seed: 3, Scale: ScaleShort, Areas: []string{AreaSFTP}})
}

package boshdirector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/storage"
)

const goodPolicy = `
volumes:
- id: pg-main/data
  diskName: pg-data
  instanceId: i-1
  diskPool: small
  policy:
    request: 10240
    limit: 204800
    targetBuffer: 25
    maintenanceWindow: {schedule: "30 2 * * 0", duration: 3h, timeZone: Europe/Paris}
    emergencyGrow: {criticalThreshold: 90, criticalMinimumFree: 2048, exceedLimitOnEmergency: true, maxActionsPerDay: 6, reservedActionsForEmergency: 2}
    cooldown: 90m
    shrinkDelay: 48h
    allowShrink: true
- id: logs
  diskName: logs
  instanceId: i-2
  diskPool: small
  policy: {request: 100, limit: 1000}
`

func TestParseVolumes(t *testing.T) {
	vols, err := ParseVolumes("p.yml", []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 2 {
		t.Fatalf("%d volumes, want 2", len(vols))
	}
	v := vols[0]
	p := v.Policy
	if v.ID != "pg-main/data" || v.DiskName != "pg-data" || v.InstanceID != "i-1" || v.DiskPool != "small" ||
		p.RequestMiB != 10240 || p.LimitMiB != 204800 || p.TargetBuffer != 25 || p.Window.Schedule != "30 2 * * 0" ||
		p.Window.Duration != 3*time.Hour || p.Window.TimeZone != "Europe/Paris" || p.Emergency.CriticalThreshold != 90 ||
		p.Emergency.CriticalMinimumFreeMiB != 2048 || !p.Emergency.ExceedLimit || p.Emergency.MaxActionsPerDay != 6 ||
		p.Emergency.ReservedForEmergency != 2 || p.Cooldown != 90*time.Minute || p.ShrinkDelay != 48*time.Hour || !p.AllowShrink {
		t.Fatalf("volume parsed as %+v", v)
	}
	d := vols[1].Policy // defaults filled in by Validate
	if d.TargetBuffer != storage.DefaultTargetBuffer || d.Cooldown != storage.DefaultCooldown || d.Window.Schedule != storage.DefaultWindowSchedule {
		t.Fatalf("defaults not filled in: %+v", d)
	}
}

func TestParseVolumesRefusesBadFiles(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "no volumes"},
		{"unknown key", "volumes:\n- id: a\n  diskName: a\n  instanceId: i\n  diskPool: p\n  policy: {request: 1, limit: 2, bogus: 3}\n", "bogus"},
		{"missing diskPool", "volumes:\n- id: a\n  diskName: a\n  instanceId: i\n  policy: {request: 1, limit: 2}\n", "volumes[0] (a): diskPool is required"},
		{"duplicate id", "volumes:\n- {id: a, diskName: a, instanceId: i, diskPool: p, policy: {request: 1, limit: 2}}\n- {id: a, diskName: b, instanceId: i, diskPool: p, policy: {request: 1, limit: 2}}\n", "id \"a\" appears twice"},
		{"duplicate disk", "volumes:\n- {id: a, diskName: d, instanceId: i, diskPool: p, policy: {request: 1, limit: 2}}\n- {id: b, diskName: d, instanceId: i, diskPool: p, policy: {request: 1, limit: 2}}\n", "sized by two volumes"},
		{"bad duration", "volumes:\n- {id: a, diskName: a, instanceId: i, diskPool: p, policy: {request: 1, limit: 2, cooldown: soon}}\n", "policy.cooldown"},
		{"limit below request", "volumes:\n- {id: a, diskName: a, instanceId: i, diskPool: p, policy: {request: 10, limit: 2}}\n", "below request"},
		{"bad cron", "volumes:\n- {id: a, diskName: a, instanceId: i, diskPool: p, policy: {request: 1, limit: 2, maintenanceWindow: {schedule: \"61 * * * *\"}}}\n", "volumes[0] (a): policy"},
		{"bad zone", "volumes:\n- {id: a, diskName: a, instanceId: i, diskPool: p, policy: {request: 1, limit: 2, maintenanceWindow: {timeZone: Mars/Olympus}}}\n", "volumes[0] (a): policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseVolumes("p.yml", []byte(tc.text))
			if !errors.Is(err, ErrBadPolicyFile) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "p.yml") {
				t.Fatalf("error %v; want ErrBadPolicyFile naming p.yml and %q", err, tc.want)
			}
		})
	}
}

func TestFileStoreSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.json")
	s, err := OpenFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok, _ := s.Load(ctx, "v"); ok {
		t.Fatal("a new store has a status")
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := storage.Status{EffectiveSizeMiB: 4096, PendingTask: "17", History: []storage.Action{{Kind: storage.EmergencyGrow, FromMiB: 2048, ToMiB: 4096, At: at, Result: storage.Issued}}}
	if err := s.Save(ctx, "v", st); err != nil {
		t.Fatal(err)
	}
	again, err := OpenFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	got, ok, _ := again.Load(ctx, "v")
	if !ok || got.EffectiveSizeMiB != 4096 || got.PendingTask != "17" || len(got.History) != 1 || !got.History[0].At.Equal(at) {
		t.Fatalf("reopened status %+v (present %v)", got, ok)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d files, want only the store (no temporary left)", len(entries))
	}
	if err := os.WriteFile(path, []byte("[1,2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFileStore(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a torn file: %v; want an error naming it", err)
	}
}

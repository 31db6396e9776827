package csisuite

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites/flex"
)

// BenchmarkCSICycle measures one create → ControllerPublish → NodeStage →
// NodePublish → NodeUnpublish → NodeUnstage → ControllerUnpublish →
// delete cycle of bosh-csi (controller and node on their sockets) on the
// embedded Director, agents and fake cloud; it reports the median.
func BenchmarkCSICycle(b *testing.B) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "csib")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	env, err := flex.StartEnv(ctx, flex.EnvConfig{Dir: filepath.Join(dir, "w"), Nodes: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	s, err := NewSession(ctx, Config{WorkDir: filepath.Join(dir, "s")}, env)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		v, err := s.create(ctx, ClauseLifecycle, "bench", 16<<20)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.up(ctx, ClauseLifecycle, v.GetVolumeId(), 0); err != nil {
			b.Fatal(err)
		}
		if err := s.down(ctx, ClauseLifecycle, v.GetVolumeId(), 0); err != nil {
			b.Fatal(err)
		}
		if err := s.deleteVol(ctx, ClauseLifecycle, v.GetVolumeId()); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	med := lat[len(lat)/2]
	b.ReportMetric(float64(med.Microseconds())/1000, "ms-median/cycle")
	b.Logf("%d cycles of create…delete: median %s (min %s, max %s)", len(lat), med, lat[0], lat[len(lat)-1])
}

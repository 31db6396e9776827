package flex

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cpilab/cpilab/flexvolume"
)

// BenchmarkDriverCycle measures one attach → waitforattach → mountdevice
// → mount → unmount → unmountdevice → detach cycle of the project's
// driver through the kubelet-like caller, against the embedded director;
// it reports the median.
func BenchmarkDriverCycle(b *testing.B) {
	dir := b.TempDir()
	drv := buildDriver(b, dir)
	env := startEnv(b)
	s, err := NewSession(Config{Driver: drv, PluginName: "cpilab~bosh-disk", WorkDir: filepath.Join(dir, "work"), Tag: "bench"}, env)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		b.Fatal(err)
	}
	vol := s.volume()
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := s.stage(ctx, ClauseLifecycle, vol, 0); err != nil {
			b.Fatal(err)
		}
		if err := s.unstage(ctx, ClauseLifecycle, vol, 0); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	med := lat[len(lat)/2]
	b.ReportMetric(float64(med.Microseconds())/1000, "ms-median/cycle")
	b.Logf("%d cycles of %s: median %s (min %s, max %s)", len(lat), flexvolume.CmdAttach+"…"+flexvolume.CmdDetach, med, lat[0], lat[len(lat)-1])
}

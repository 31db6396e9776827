package director_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
)

// BenchmarkProvideDetachPairs measures provide+detach task pairs per second
// with the reference CPI in process, spread over 100 VMs: 100 callers, one
// per instance, each providing its disk and detaching it again.
func BenchmarkProvideDetachPairs(b *testing.B) {
	w := newWorld(b, worldOpts{instances: 100,
		lab:       func(c *lab.Config) { c.AgentTaskPollInterval = time.Millisecond },
		configure: func(c *director.Config) { c.DynamicDiskWorkers = 16 }})
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("bench-%d", i)
			for range next {
				w.done(w.d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: name, DiskPoolName: "small", InstanceID: w.insts[i].ID}))
				w.done(w.d.DetachDynamicDisk("admin", name))
			}
		}()
	}
	for n := range b.N {
		next <- n
	}
	close(next)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
}

// BenchmarkProvideDetachPairsHTTP is BenchmarkProvideDetachPairs through
// the HTTP API (TLS, bearer token, clients polling tasks every 5 ms).
func BenchmarkProvideDetachPairsHTTP(b *testing.B) {
	a := newAPIWorld(b, worldOpts{instances: 100,
		lab:       func(c *lab.Config) { c.AgentTaskPollInterval = time.Millisecond },
		configure: func(c *director.Config) { c.DynamicDiskWorkers = 16 }})
	tok, _, err := a.auth.Issue(director.Principal{Name: "csi", Scopes: director.DiskScopes})
	if err != nil {
		b.Fatal(err)
	}
	c, err := director.NewClient(director.ClientConfig{URL: a.srv.URL(), CACertPEM: a.srv.CACertPEM(), Token: tok,
		PollInterval: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("bench-%d", i)
			for range next {
				if _, err := c.Provide(ctx, director.ProvideRequest{DiskSize: 4, DiskName: name, DiskPoolName: "small", InstanceID: a.insts[i].ID}); err != nil {
					b.Error(err)
				}
				if err := c.DetachDynamicDisk(ctx, name); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for n := range b.N {
		next <- n
	}
	close(next)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
}

// BenchmarkProvideLatencyExecCPI measures provide latency (queued to done)
// with the reference CPI executable (bin/fakeiaas-cpi, built if absent), one
// provide at a time, and reports the median.
func BenchmarkProvideLatencyExecCPI(b *testing.B) {
	bin := cpiBinary(b)
	w := newWorld(b, worldOpts{instances: 2, lab: func(c *lab.Config) {
		c.CPICommand = []string{bin}
		c.AgentTaskPollInterval = time.Millisecond
	}})
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("lat-%d", i)
		t0 := time.Now()
		w.done(w.provide(name, i%2))
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		w.done(w.d.DeleteDynamicDisk("admin", name))
		b.StartTimer()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}

func cpiBinary(b *testing.B) string {
	b.Helper()
	if p, err := filepath.Abs("../bin/fakeiaas-cpi"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p := filepath.Join(b.TempDir(), "fakeiaas-cpi")
	cmd := exec.Command("go", "build", "-o", p, "../cmd/fakeiaas-cpi")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build fakeiaas-cpi: %v\n%s", err, out)
	}
	return p
}

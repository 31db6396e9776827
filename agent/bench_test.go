package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// BenchmarkPing1000Agents: 1,000 agents, each on its own connection to one
// embedded nats-server, answer ping from one director client, with 1, 10
// and 50 pings in flight at a time. Reports the p50 and p99 round-trip
// latency (target: p99 ≤ 20 ms).
func BenchmarkPing1000Agents(b *testing.B) {
	const agents = 1000
	srv, err := mbus.StartEmbedded(mbus.EmbeddedConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	settings := newSettingsServer(b)
	r := rt.Real(1)
	data := b.TempDir()
	ids := make([]string, agents)
	for i := range ids {
		vm := fmt.Sprintf("vm-%04d", i)
		ids[i] = fmt.Sprintf("agent-%04d", i)
		root := filepath.Join(data, vm)
		if err := os.MkdirAll(root, 0o755); err != nil {
			b.Fatal(err)
		}
		settings.setRegistry(vm, testSettings(ids[i], vm, srv.URL()))
		a, err := agent.Start(agent.Config{
			Root: root, VMCID: vm, RegistryURL: "http://fakeiaas.invalid/registry",
			RegistryUser: settings.user, RegistryPassword: settings.pass,
			Fetcher: agent.HandlerFetcher(settings.srv.Config.Handler), Runtime: r,
		})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Stop()
	}
	tr, err := mbus.Connect(mbus.NATSConfig{URL: srv.URL(), Name: "director"})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	c, err := mbus.NewClient(mbus.ClientConfig{Transport: tr, Runtime: r, DirectorUUID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	// Warm up: every agent answers once before measuring.
	for _, id := range ids {
		if err := c.WaitUntilReady(id, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}

	for _, inFlight := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("inflight=%d", inFlight), func(b *testing.B) {
			pingRounds(b, c, ids, inFlight)
		})
	}
}

// pingRounds pings every agent once per b.Loop iteration, inFlight at a
// time, and reports latency percentiles.
func pingRounds(b *testing.B, c *mbus.Client, ids []string, inFlight int) {
	var mu sync.Mutex
	var lat []time.Duration
	var failures int
	for b.Loop() {
		work := make(chan string)
		var wg sync.WaitGroup
		for range inFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					start := time.Now()
					err := c.Ping(id)
					d := time.Since(start)
					mu.Lock()
					if err != nil {
						failures++
					} else {
						lat = append(lat, d)
					}
					mu.Unlock()
				}
			}()
		}
		for _, id := range ids {
			work <- id
		}
		close(work)
		wg.Wait()
	}
	if failures > 0 {
		b.Fatalf("%d of %d pings failed (1 s ping time-out)", failures, failures+len(lat))
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

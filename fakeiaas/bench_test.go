package fakeiaas_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

// BenchmarkHTTPOps8Clients measures fakeiaas operations per second from 8
// concurrent clients over loopback HTTP, with the durable (sqlite) store:
// each client cycles create_disk, set_disk_metadata, get_disk and
// delete_disk, so three of every four operations are acknowledged only
// once on disk. Target: ≥ 2,000 ops/s.
//
// FAKEIAAS_BENCH_DIR puts the data dir under another directory than the
// test's temporary one (creating files is much slower in some /tmp mounts);
// FAKEIAAS_BENCH_STORE=memory measures without the durable store.
func BenchmarkHTTPOps8Clients(b *testing.B) {
	srv, err := fakeiaas.Serve(fakeiaas.ServeConfig{DataDir: benchDir(b), Store: os.Getenv("FAKEIAAS_BENCH_STORE")})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	const clients = 8
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	var failed sync.Once
	for w := range clients {
		n := b.N / clients
		if w < b.N%clients {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := fakeiaas.NewClient(srv.URL())
			var d fakeiaas.Disk
			var err error
			for i := range n {
				switch i % 4 {
				case 0:
					d, err = c.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1})
				case 1:
					err = c.SetDiskMetadata(bg, d.CID, cpiv2.Metadata{"i": strconv.Itoa(i)})
				case 2:
					_, err = c.Disk(bg, d.CID)
				case 3:
					err = c.DeleteDisk(bg, d.CID)
				}
				if err != nil {
					failed.Do(func() { b.Errorf("op %d: %v", i, err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	if commits, batches := fakeiaas.CommitStats(srv.Cloud()); commits > 0 {
		b.ReportMetric(float64(batches)/float64(commits), "ops/commit")
	}
}

// BenchmarkRSS10kVMs50kDisks builds a cloud of 10,000 VMs and 50,000 disks
// (durable store, created by 32 concurrent callers) and reports the
// process's resident set size in MB. Target: ≤ 300 MB. It does the work
// once whatever b.N is.
func BenchmarkRSS10kVMs50kDisks(b *testing.B) {
	const vms, disks, workers = 10_000, 50_000, 32
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: benchDir(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sc := mustStemcell(b, c, 2)
	b.ResetTimer()
	var wg sync.WaitGroup
	var failed sync.Once
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < vms+disks; i += workers {
				var err error
				if i < vms {
					_, err = c.CreateVM(bg, fakeiaas.VMSpec{AgentID: "agent-" + strconv.Itoa(i), StemcellCID: sc.CID,
						Networks: []byte(`{"default":{"type":"manual","ip":"10.0.0.1"}}`)})
				} else {
					_, err = c.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1024})
				}
				if err != nil {
					failed.Do(func() { b.Errorf("create %d: %v", i, err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	s, _ := c.State(bg)
	if len(s.VMs) != vms || len(s.Disks) != disks {
		b.Fatalf("state has %d VMs and %d disks", len(s.VMs), len(s.Disks))
	}
	s = fakeiaas.State{}
	rss, ok := rssMB()
	if !ok {
		b.Skip("no /proc/self/status: cannot read RSS on this OS")
	}
	b.ReportMetric(rss, "RSS-MB")
}

// benchDir is a fresh data dir under FAKEIAAS_BENCH_DIR, or b.TempDir().
func benchDir(b *testing.B) string {
	parent := os.Getenv("FAKEIAAS_BENCH_DIR")
	if parent == "" {
		return b.TempDir()
	}
	d, err := os.MkdirTemp(parent, "fakeiaas-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func rssMB() (float64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024, err == nil
		}
	}
	return 0, false
}

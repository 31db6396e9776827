package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/internal/pgtest"
)

// BenchmarkDirectorProcesses measures provide + detach pairs per second on
// one fake cloud: SQLite with one director process, then PostgreSQL with one
// api process and 1, 2 and 4 worker processes (each with the default two
// dynamic-disk workers), and prints each rate with its ratio to SQLite's.
// The whole comparison is one iteration; it skips without a PostgreSQL
// cluster (scripts/postgres.sh run go test -bench DirectorProcesses
// -benchtime 1x ./cmd/cpilab/).
func BenchmarkDirectorProcesses(b *testing.B) {
	pg := []string{pgtest.URL(b), pgtest.URL(b), pgtest.URL(b)}
	type shape struct {
		name    string
		db      string
		workers int
	}
	shapes := []shape{{"sqlite, 1 process", "", 0}, {"postgres, 1 worker process", pg[0], 1},
		{"postgres, 2 worker processes", pg[1], 2}, {"postgres, 4 worker processes", pg[2], 4}}
	const clients, pairsEach = 8, 4
	for range b.N {
		rates := make([]float64, len(shapes))
		for i, s := range shapes {
			b.StopTimer()
			c := startCluster(b, clusterConfig{database: s.db, workers: s.workers})
			insts := c.deploy(b, "bench", 4)
			b.StartTimer()
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for g := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					defer cancel()
					name := fmt.Sprintf("bench-%d", g)
					for range pairsEach {
						if _, err := c.disks.Provide(ctx, director.ProvideRequest{InstanceID: insts[g%len(insts)].ID, DiskName: name,
							DiskPoolName: "dynamic", DiskSize: 16}); err != nil {
							errs <- err
							return
						}
						if err := c.disks.DetachDynamicDisk(ctx, name); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatalf("%s: %v", s.name, err)
			}
			rates[i] = float64(clients*pairsEach) / time.Since(start).Seconds()
			b.StopTimer()
		}
		for i, s := range shapes {
			b.Logf("%-30s %7.2f pairs/s  %5.2f× sqlite", s.name, rates[i], rates[i]/rates[0])
		}
		b.ReportMetric(rates[0], "pairs/s-sqlite")
		b.ReportMetric(rates[1], "pairs/s-pg-1w")
		b.ReportMetric(rates[2], "pairs/s-pg-2w")
		b.ReportMetric(rates[3], "pairs/s-pg-4w")
		b.ReportMetric(0, "ns/op")
	}
}

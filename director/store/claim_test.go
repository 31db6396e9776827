package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/internal/pgtest"
)

var (
	_ store.Claimer = (*store.Memory)(nil)
	_ store.Claimer = (*store.SQLite)(nil)
	_ store.Claimer = (*store.Postgres)(nil)
)

type job struct {
	State string `json:"state"`
	Queue string `json:"queue"`
	Owner string `json:"owner,omitempty"`
}

// openers returns one store per process for each implementation; memory and
// SQLite hand out the same store (one process), PostgreSQL a new pool on
// one database each time (several processes).
func openers() map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func() func(*testing.T) store.Store {
			m := store.NewMemory()
			return func(*testing.T) store.Store { return m }
		}(),
		"sqlite": func() func(*testing.T) store.Store {
			var once sync.Once
			var s *store.SQLite
			return func(t *testing.T) store.Store {
				once.Do(func() {
					var err error
					if s, err = store.OpenSQLite(filepath.Join(t.TempDir(), "d.db")); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { s.Close() })
				})
				return s
			}
		}(),
		"postgres": func() func(*testing.T) store.Store {
			var url string
			return func(t *testing.T) store.Store {
				if url == "" {
					url = pgtest.URL(t)
				}
				s, err := store.OpenPostgres(context.Background(), store.PostgresConfig{URL: url, MaxConns: 4})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
		}(),
	}
}

// ClaimFirst hands out the oldest matching record, skips what does not
// match, and reports false when nothing is left.
func TestClaimFirstOrderAndMatch(t *testing.T) {
	for name, open := range openers() {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			err := s.Update(func(tx store.Tx) error {
				for i, j := range []job{{"queued", "normal", ""}, {"done", "disks", ""}, {"queued", "disks", ""}, {"queued", "disks", ""}} {
					if err := tx.Insert(store.Tasks, store.IDKey(int64(i+1)), j); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			c := s.(store.Claimer)
			var got []string
			for range 3 {
				ok, err := c.ClaimFirst(store.Tasks, store.Match{"state": {"queued"}, "queue": {"disks", "urgent"}},
					func(tx store.Tx, key string, raw []byte) error {
						var j job
						if err := json.Unmarshal(raw, &j); err != nil {
							return err
						}
						j.State, j.Owner = "processing", "me"
						got = append(got, key)
						return tx.Put(store.Tasks, key, j)
					})
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					got = append(got, "none")
				}
			}
			want := []string{store.IDKey(3), store.IDKey(4), "none"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("claims %v, want %v (record 1 is on another queue, 2 is done)", got, want)
			}
			var j job
			if err := s.View(func(tx store.Tx) error { _, err := tx.Get(store.Tasks, store.IDKey(1), &j); return err }); err != nil {
				t.Fatal(err)
			}
			if j.State != "queued" {
				t.Fatalf("record 1 = %+v, want it untouched", j)
			}
		})
	}
}

// Workers (on PostgreSQL: each with its own connection pool, as separate
// processes) claiming at once never claim one record twice, and every
// record is claimed.
func TestClaimFirstNeverTwice(t *testing.T) {
	const n, workers = 60, 4
	for name, open := range openers() {
		t.Run(name, func(t *testing.T) {
			first := open(t)
			err := first.Update(func(tx store.Tx) error {
				for i := 1; i <= n; i++ {
					if err := tx.Insert(store.Tasks, store.IDKey(int64(i)), job{State: "queued", Queue: "q"}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			claimedBy := map[string][]int{}
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				s := open(t)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						var key string
						ok, err := s.(store.Claimer).ClaimFirst(store.Tasks, store.Match{"state": {"queued"}},
							func(tx store.Tx, k string, raw []byte) error {
								key = k
								return tx.Put(store.Tasks, k, job{State: "processing", Queue: "q", Owner: fmt.Sprint(w)})
							})
						if err != nil {
							errs <- err
							return
						}
						if !ok {
							return
						}
						mu.Lock()
						claimedBy[key] = append(claimedBy[key], w)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if len(claimedBy) != n {
				t.Fatalf("%d records claimed, want %d", len(claimedBy), n)
			}
			for k, ws := range claimedBy {
				if len(ws) != 1 {
					t.Fatalf("record %s claimed by workers %v", k, ws)
				}
			}
		})
	}
}

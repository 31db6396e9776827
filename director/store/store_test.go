package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/internal/pgtest"
)

type rec struct{ V int }

// Both stores honour the same contract.
func TestStores(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Store{
		"memory": func(*testing.T) store.Store { return store.NewMemory() },
		"postgres": func(t *testing.T) store.Store {
			s, err := store.OpenPostgres(context.Background(), store.PostgresConfig{URL: pgtest.URL(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"sqlite": func(t *testing.T) store.Store {
			s, err := store.OpenSQLite(filepath.Join(t.TempDir(), "d.db"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			defer s.Close()
			if err := s.Update(func(tx store.Tx) error { return tx.Insert(store.Disks, "a", rec{1}) }); err != nil {
				t.Fatal(err)
			}
			err := s.Update(func(tx store.Tx) error { return tx.Insert(store.Disks, "a", rec{2}) })
			if !errors.Is(err, store.ErrExists) {
				t.Fatalf("second Insert: %v; want ErrExists", err)
			}
			boom := errors.New("boom")
			err = s.Update(func(tx store.Tx) error {
				if err := tx.Put(store.Disks, "b", rec{3}); err != nil {
					return err
				}
				if err := tx.Delete(store.Disks, "a"); err != nil {
					return err
				}
				var r rec
				if ok, _ := tx.Get(store.Disks, "b", &r); !ok || r.V != 3 {
					t.Errorf("a transaction does not read its own write: %v %v", ok, r)
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("Update returned %v", err)
			}
			var keys []string
			_ = s.View(func(tx store.Tx) error {
				return tx.List(store.Disks, func(k string, _ []byte) error { keys = append(keys, k); return nil })
			})
			if len(keys) != 1 || keys[0] != "a" {
				t.Fatalf("after a failed Update the keys are %v; want [a] (rolled back)", keys)
			}
			var ids []int64
			for range 3 {
				_ = s.Update(func(tx store.Tx) error {
					id, err := tx.NextID("tasks")
					ids = append(ids, id)
					return err
				})
			}
			if ids[0] != 1 || ids[2] != 3 {
				t.Fatalf("NextID gave %v", ids)
			}
			if err := s.View(func(tx store.Tx) error { return tx.Put(store.Disks, "x", rec{}) }); err == nil {
				t.Fatal("a write in View succeeded")
			}
			if err := s.Update(func(tx store.Tx) error { return tx.Put("nope", "x", rec{}) }); err == nil {
				t.Fatal("a write to an unknown kind succeeded")
			}
			if store.IDKey(2) >= store.IDKey(10) {
				t.Fatal("IDKey does not sort numerically")
			}
		})
	}
}

func TestSQLiteReopenKeepsDataAndSchema(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d.db")
	s, err := store.OpenSQLite(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx store.Tx) error { return tx.Put(store.Tasks, "k", rec{7}) }); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s, err = store.OpenSQLite(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, err := s.SchemaVersion()
	if err != nil || v != len(store.AllKinds)+1 {
		t.Fatalf("schema version %d, %v; want %d", v, err, len(store.AllKinds)+1)
	}
	var r rec
	_ = s.View(func(tx store.Tx) error { _, err := tx.Get(store.Tasks, "k", &r); return err })
	if r.V != 7 {
		t.Fatalf("after reopen the record is %v", r)
	}
}

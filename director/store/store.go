// Package store is the director's persistent state: a transactional store of
// JSON records grouped by kind. SQLite (embedded, durable, the default) and
// memory (the simulator and fast tests) implement it behind a small
// interface.
//
// Records are keyed strings within a kind. Every Update is atomic: either all
// of its writes are applied or none are. Insert refuses an existing key, which
// is how unique names (dynamic disks by name, locks by name) are enforced.
//
//	s, err := store.OpenSQLite(filepath.Join(dir, "director.db"))
//	if err != nil { … }
//	defer s.Close()
//	err = s.Update(func(tx store.Tx) error {
//		id, err := tx.NextID("tasks")
//		if err != nil {
//			return err
//		}
//		return tx.Insert(store.Tasks, store.IDKey(id), task)
//	})
package store

import (
	"errors"
	"fmt"
)

// Kind names a group of records (a table in SQLite).
type Kind string

// The kinds the director keeps. Each is one table in SQLite.
const (
	Tasks         Kind = "tasks"
	Locks         Kind = "locks"
	Stemcells     Kind = "stemcells"
	CloudConfigs  Kind = "cloud_configs"
	Deployments   Kind = "deployments"
	Instances     Kind = "instances"
	VMs           Kind = "vms"
	Disks         Kind = "disks"
	DynamicDisks  Kind = "dynamic_disks"
	OrphanedDisks Kind = "orphaned_disks"
	Users         Kind = "users"
	// Intents are the director's records of CPI calls in flight whose
	// outcome a crash could lose (create_vm, delete_vm, …): written before
	// the call, removed with the record of its outcome.
	Intents Kind = "intents"
)

// AllKinds lists every kind. A new kind also needs its table migration
// appended in sqlite.go.
var AllKinds = []Kind{Tasks, Locks, Stemcells, CloudConfigs, Deployments, Instances, VMs, Disks,
	DynamicDisks, OrphanedDisks, Users, Intents}

// Errors returned (wrapped) by stores.
var (
	// ErrExists is returned by Insert when the key is taken.
	ErrExists = errors.New("store: record exists")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("store: closed")
)

// Tx is one transaction's view of the store. A Tx is valid only inside the
// function given to Update or View.
type Tx interface {
	// Get decodes the record kind/key into v; it reports false when absent.
	Get(kind Kind, key string, v any) (bool, error)
	// Put writes v (JSON-encoded) as kind/key, replacing any record.
	Put(kind Kind, key string, v any) error
	// Insert writes v as kind/key, or fails with ErrExists.
	Insert(kind Kind, key string, v any) error
	// Delete removes kind/key; deleting an absent record is not an error.
	Delete(kind Kind, key string) error
	// List calls fn for every record of kind in key order; fn decodes raw
	// itself. An error from fn stops the listing and is returned.
	List(kind Kind, fn func(key string, raw []byte) error) error
	// NextID returns the next value (1, 2, …) of the named sequence.
	NextID(seq string) (int64, error)
}

// Store is the director's persistent state.
type Store interface {
	// Update runs fn in a read-write transaction, committing if fn returns
	// nil. A committed Update is durable before Update returns (for SQLite:
	// it survives kill -9 of the process).
	Update(fn func(Tx) error) error
	// View runs fn in a read-only transaction.
	View(fn func(Tx) error) error
	// Close releases the store.
	Close() error
}

// IDKey is the key of a record identified by a sequence number: zero-padded
// so that key order is numeric order.
func IDKey(id int64) string { return fmt.Sprintf("%016d", id) }

func validKind(k Kind) error {
	for _, x := range AllKinds {
		if x == k {
			return nil
		}
	}
	return fmt.Errorf("store: unknown kind %q", k)
}

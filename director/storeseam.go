package director

import "github.com/cpilab/cpilab/director/store"

// Store is the Director's persistence, package director/store's interface:
// what Config.Store takes. Code outside the Director names it through this
// alias and never reads it: a harness that must reach a store (to share one
// between director generations, or to make a crashed generation's calls hang)
// gets one from MemoryStore and wraps it with GuardedStore.
type Store = store.Store

// MemoryStore returns an empty in-memory store: nothing survives the process.
func MemoryStore() Store { return store.NewMemory() }

// GuardedStore returns st with before called at the start of every Update
// and View, before the transaction; Close is not passed on (st outlives the
// guard). A harness simulating a crashed director makes before block.
func GuardedStore(st Store, before func()) Store { return &guardedStore{st: st, before: before} }

type guardedStore struct {
	st     Store
	before func()
}

func (g *guardedStore) Update(fn func(store.Tx) error) error { g.before(); return g.st.Update(fn) }
func (g *guardedStore) View(fn func(store.Tx) error) error   { g.before(); return g.st.View(fn) }
func (g *guardedStore) Close() error                         { return nil }

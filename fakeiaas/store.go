package fakeiaas

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
)

// Record kinds in the store.
const (
	kindStemcell = "stemcell"
	kindVM       = "vm"
	kindDisk     = "disk"
	kindSnapshot = "snapshot"
	kindRegistry = "registry"
)

// record is one object to write; Data nil deletes it. A Create record
// must not replace an object already stored under Kind and ID: the store
// refuses the whole batch with a *RecordExistsError instead.
type record struct {
	Kind, ID string
	Data     []byte
	Create   bool
}

// RecordExistsError is a create that would have replaced an object already
// stored: the store refuses it, whatever the engine above it believed.
// errors.Is(err, ErrExists) holds.
type RecordExistsError struct{ Kind, ID string }

func (e *RecordExistsError) Error() string {
	return fmt.Sprintf("fakeiaas store: refusing to create %s %q: a record with that ID already exists", e.Kind, e.ID)
}

// Is matches ErrExists.
func (e *RecordExistsError) Is(target error) bool { return target == ErrExists }

// batch is what one operation changes: objects and history entries. A
// store applies a batch atomically.
type batch struct {
	records []record
	history []HistoryEntry
}

func (b *batch) put(kind, id string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic("fakeiaas: encoding " + kind + ": " + err.Error()) // our own types always encode
	}
	b.records = append(b.records, record{Kind: kind, ID: id, Data: data})
}

// create is put for a new object: the store refuses it if kind/id exists.
func (b *batch) create(kind, id string, v any) {
	b.put(kind, id, v)
	b.records[len(b.records)-1].Create = true
}

func (b *batch) del(kind, id string) { b.records = append(b.records, record{Kind: kind, ID: id}) }

// ticket is a queued batch; wait returns once it is durable.
type ticket interface{ wait() error }

type doneTicket struct{ err error }

func (t doneTicket) wait() error { return t.err }

// store is the durability seam. enqueue is called with the engine lock
// held, so batches reach the store in the order they were applied in
// memory; wait is called without it, so many operations share one commit.
type store interface {
	// load returns every stored object by kind and id, and the highest
	// history sequence number.
	load() (objs map[string]map[string][]byte, lastSeq int64, err error)
	enqueue(b batch) ticket
	history(f HistoryFilter, limit int) ([]HistoryEntry, error)
	// startSeed is 0 for a store that starts empty every time (memory);
	// for a durable store it differs on every open, so that the CIDs of
	// one run never repeat those of an earlier run on the same data.
	startSeed() uint64
	close() error
}

// memStore keeps everything in memory: the simulator's and fast tests'
// store. Nothing survives the process.
type memStore struct {
	mu   sync.Mutex
	objs map[string]map[string][]byte // guarded by mu
	hist []HistoryEntry               // guarded by mu
}

func newMemStore() *memStore { return &memStore{objs: map[string]map[string][]byte{}} }

func (m *memStore) load() (map[string]map[string][]byte, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var last int64
	if n := len(m.hist); n > 0 {
		last = m.hist[n-1].Seq
	}
	out := map[string]map[string][]byte{}
	for k, ids := range m.objs {
		out[k] = map[string][]byte{}
		for id, d := range ids {
			out[k][id] = d
		}
	}
	return out, last, nil
}

func (m *memStore) enqueue(b batch) ticket {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range b.records {
		if _, ok := m.objs[r.Kind][r.ID]; ok && r.Create {
			return doneTicket{err: &RecordExistsError{Kind: r.Kind, ID: r.ID}}
		}
	}
	for _, r := range b.records {
		if m.objs[r.Kind] == nil {
			m.objs[r.Kind] = map[string][]byte{}
		}
		if r.Data == nil {
			delete(m.objs[r.Kind], r.ID)
		} else {
			m.objs[r.Kind][r.ID] = r.Data
		}
	}
	m.hist = append(m.hist, b.history...)
	return doneTicket{}
}

func (m *memStore) history(f HistoryFilter, limit int) ([]HistoryEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.hist), func(i int) bool { return m.hist[i].Seq > f.Since })
	var out []HistoryEntry
	for _, h := range m.hist[i:] {
		if f.match(h) {
			out = append(out, h)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
	}
	return out, nil
}

func (m *memStore) startSeed() uint64 { return 0 }

func (m *memStore) close() error { return nil }

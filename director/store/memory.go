package store

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
)

// Memory is an in-memory Store. It is what the simulator uses: it never
// blocks across a scheduling point (its mutex is held only inside a call), so
// it is safe under any rt.Runtime.
type Memory struct {
	mu     sync.Mutex
	data   map[Kind]map[string][]byte // guarded by mu
	seqs   map[string]int64           // guarded by mu
	closed bool                       // guarded by mu
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	m := &Memory{data: map[Kind]map[string][]byte{}, seqs: map[string]int64{}}
	for _, k := range AllKinds {
		m.data[k] = map[string][]byte{}
	}
	return m
}

// Update implements Store.
func (m *Memory) Update(fn func(Tx) error) error { return m.run(fn, true) }

// View implements Store.
func (m *Memory) View(fn func(Tx) error) error { return m.run(fn, false) }

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func (m *Memory) run(fn func(Tx) error, write bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	tx := &memTx{m: m, write: write, puts: map[Kind]map[string][]byte{}, seqs: map[string]int64{}}
	if err := fn(tx); err != nil {
		return err
	}
	for k, recs := range tx.puts {
		for key, b := range recs {
			if b == nil {
				delete(m.data[k], key)
			} else {
				m.data[k][key] = b
			}
		}
	}
	for s, v := range tx.seqs {
		m.seqs[s] = v
	}
	return nil
}

// memTx buffers writes in an overlay applied on commit; nil marks a delete.
type memTx struct {
	m     *Memory
	write bool
	puts  map[Kind]map[string][]byte
	seqs  map[string]int64
}

func (t *memTx) lookup(k Kind, key string) ([]byte, bool) {
	if o, ok := t.puts[k]; ok {
		if b, ok := o[key]; ok {
			return b, b != nil
		}
	}
	b, ok := t.m.data[k][key]
	return b, ok
}

func (t *memTx) Get(k Kind, key string, v any) (bool, error) {
	if err := validKind(k); err != nil {
		return false, err
	}
	b, ok := t.lookup(k, key)
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("store: decode %s/%s: %w", k, key, err)
	}
	return true, nil
}

func (t *memTx) set(k Kind, key string, b []byte) error {
	if !t.write {
		return fmt.Errorf("store: write to %s/%s in a read-only transaction", k, key)
	}
	if t.puts[k] == nil {
		t.puts[k] = map[string][]byte{}
	}
	t.puts[k][key] = b
	return nil
}

func (t *memTx) Put(k Kind, key string, v any) error {
	if err := validKind(k); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s/%s: %w", k, key, err)
	}
	return t.set(k, key, b)
}

func (t *memTx) Insert(k Kind, key string, v any) error {
	if err := validKind(k); err != nil {
		return err
	}
	if _, ok := t.lookup(k, key); ok {
		return fmt.Errorf("%w: %s/%s", ErrExists, k, key)
	}
	return t.Put(k, key, v)
}

func (t *memTx) Delete(k Kind, key string) error {
	if err := validKind(k); err != nil {
		return err
	}
	return t.set(k, key, nil)
}

func (t *memTx) List(k Kind, fn func(string, []byte) error) error {
	if err := validKind(k); err != nil {
		return err
	}
	keys := make([]string, 0, len(t.m.data[k]))
	for key := range t.m.data[k] {
		if _, over := t.puts[k][key]; !over {
			keys = append(keys, key)
		}
	}
	for key, b := range t.puts[k] {
		if b != nil {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		b, _ := t.lookup(k, key)
		if err := fn(key, b); err != nil {
			return err
		}
	}
	return nil
}

func (t *memTx) NextID(seq string) (int64, error) {
	if !t.write {
		return 0, fmt.Errorf("store: NextID(%s) in a read-only transaction", seq)
	}
	v, ok := t.seqs[seq]
	if !ok {
		v = t.m.seqs[seq]
	}
	v++
	t.seqs[seq] = v
	return v, nil
}

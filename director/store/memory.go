package store

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"
)

// Memory is an in-memory Store. It is what the simulator uses: it never
// blocks across a scheduling point (its mutex is held only inside a call), so
// it is safe under any rt.Runtime.
//
// Records are kept as their JSON bytes, as the other stores keep them, and
// each version of a record remembers what it decoded to (memcopy.go): a
// record read many times between writes is decoded once.
type Memory struct {
	mu     sync.Mutex
	data   map[Kind]map[string]*memRecord // guarded by mu
	seqs   map[string]int64               // guarded by mu
	closed bool                           // guarded by mu
}

// memRecord is one version of a record: its bytes, and what they decoded to
// for each Go type they were read as (guarded by Memory.mu).
type memRecord struct {
	raw     []byte
	decoded []decodedAs
}

type decodedAs struct {
	t reflect.Type
	v reflect.Value // of type t; never handed out, only copies of it
}

// decode is json.Unmarshal(r.raw, v). Into a zero value of a type the copier
// can copy, it hands out a deep copy of the value the bytes decoded to the
// first time they were read as that type.
func (r *memRecord) decode(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return json.Unmarshal(r.raw, v)
	}
	t, dst := rv.Type().Elem(), rv.Elem()
	if !infoOf(t).copyable || !dst.IsZero() {
		return json.Unmarshal(r.raw, v) // json.Unmarshal merges into what v holds
	}
	for _, d := range r.decoded {
		if d.t == t {
			deepCopy(dst, d.v)
			return nil
		}
	}
	nv := reflect.New(t)
	if err := json.Unmarshal(r.raw, nv.Interface()); err != nil {
		// What a failed decode leaves in v is json.Unmarshal's to say.
		return json.Unmarshal(r.raw, v)
	}
	if !interfaceCopyable(nv.Elem()) {
		dst.Set(nv.Elem()) // not cached: the caller's alone
		return nil
	}
	r.decoded = append(r.decoded, decodedAs{t: t, v: nv.Elem()})
	deepCopy(dst, nv.Elem())
	return nil
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	m := &Memory{data: map[Kind]map[string]*memRecord{}, seqs: map[string]int64{}}
	for _, k := range AllKinds {
		m.data[k] = map[string]*memRecord{}
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
	tx := &memTx{m: m, write: write, puts: map[Kind]map[string]*memRecord{}, seqs: map[string]int64{}}
	if err := fn(tx); err != nil {
		return err
	}
	for k, recs := range tx.puts {
		for key, r := range recs {
			if r == nil {
				delete(m.data[k], key)
			} else {
				m.data[k][key] = r
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
	puts  map[Kind]map[string]*memRecord
	seqs  map[string]int64
}

func (t *memTx) lookup(k Kind, key string) (*memRecord, bool) {
	if o, ok := t.puts[k]; ok {
		if r, ok := o[key]; ok {
			return r, r != nil
		}
	}
	r, ok := t.m.data[k][key]
	return r, ok
}

func (t *memTx) Get(k Kind, key string, v any) (bool, error) {
	if err := validKind(k); err != nil {
		return false, err
	}
	r, ok := t.lookup(k, key)
	if !ok {
		return false, nil
	}
	if err := r.decode(v); err != nil {
		return false, fmt.Errorf("store: decode %s/%s: %w", k, key, err)
	}
	return true, nil
}

// set records r (nil: a delete) as kind/key in the transaction's overlay.
func (t *memTx) set(k Kind, key string, r *memRecord) error {
	if !t.write {
		return fmt.Errorf("store: write to %s/%s in a read-only transaction", k, key)
	}
	if t.puts[k] == nil {
		t.puts[k] = map[string]*memRecord{}
	}
	t.puts[k][key] = r
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
	return t.set(k, key, &memRecord{raw: b})
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
	for key, r := range t.puts[k] {
		if r != nil {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		r, _ := t.lookup(k, key)
		if err := fn(key, r.raw); err != nil {
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

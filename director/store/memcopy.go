package store

import (
	"reflect"
	"sync"
	"time"
)

// Memory keeps, next to each record's JSON bytes, what they decoded to for
// each Go type a caller read them as. A later Get of the same version into
// a zero value of the same type receives a deep copy of that decoded value
// instead of decoding the bytes again. A deep copy of a decoded value is
// what decoding again would give: the copy shares nothing mutable with the
// cache (slices, maps and pointers are new; strings are immutable), and nil
// stays nil while empty stays empty. The types it copies are those whose
// every part it can reach: a struct with an unexported field that holds a
// reference (pointer, slice, map, interface, channel, function) is not
// copied, and neither is a channel or a function; Get decodes those every
// time. time.Time is copied as a value (its location is never mutated).

var timeType = reflect.TypeFor[time.Time]()

// typeInfo is what the copier knows of a type: whether a deep copy of it
// can be made (copyable), whether a shallow copy already is one (flat), and
// whether it holds an interface somewhere (whose dynamic type is only known
// from a value).
type typeInfo struct{ copyable, flat, ifaces bool }

var typeInfos sync.Map // reflect.Type → typeInfo

func infoOf(t reflect.Type) typeInfo {
	if v, ok := typeInfos.Load(t); ok {
		return v.(typeInfo)
	}
	inf := examine(t, map[reflect.Type]bool{})
	typeInfos.Store(t, inf)
	return inf
}

// examine works out t's typeInfo. A type met again while being examined
// (a recursive type) holds a reference to itself, so it is not flat; its
// copyability is decided by the rest of its parts.
func examine(t reflect.Type, visiting map[reflect.Type]bool) typeInfo {
	if t == timeType {
		return typeInfo{copyable: true, flat: true}
	}
	if visiting[t] {
		return typeInfo{copyable: true, flat: false}
	}
	visiting[t] = true
	defer delete(visiting, t)
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
		return typeInfo{copyable: true, flat: true}
	case reflect.Array:
		return examine(t.Elem(), visiting)
	case reflect.Slice, reflect.Pointer:
		e := examine(t.Elem(), visiting)
		return typeInfo{copyable: e.copyable, ifaces: e.ifaces}
	case reflect.Map:
		k, e := examine(t.Key(), visiting), examine(t.Elem(), visiting)
		return typeInfo{copyable: k.copyable && e.copyable, ifaces: k.ifaces || e.ifaces}
	case reflect.Interface:
		// The dynamic value's type is examined when it is cached.
		return typeInfo{copyable: true, ifaces: true}
	case reflect.Struct:
		inf := typeInfo{copyable: true, flat: true}
		for i := range t.NumField() {
			f := t.Field(i)
			fi := examine(f.Type, visiting)
			if !f.IsExported() && !fi.flat {
				return typeInfo{}
			}
			inf.copyable = inf.copyable && fi.copyable
			inf.flat = inf.flat && fi.flat
			inf.ifaces = inf.ifaces || fi.ifaces
		}
		return inf
	default: // channels, functions, unsafe pointers
		return typeInfo{}
	}
}

// deepCopy sets dst, a settable value of src's type, to a copy of src that
// shares nothing mutable with it. src's type is copyable.
func deepCopy(dst, src reflect.Value) { planOf(src.Type()).copy(dst, src) }

// plan is how to copy a value of one type, worked out once per type.
type plan struct {
	copy func(dst, src reflect.Value)
}

var (
	plans     sync.Map   // reflect.Type → *plan, complete ones only
	plansMu   sync.Mutex // held while plans are built
	copyValue = func(dst, src reflect.Value) { dst.Set(src) }
)

func planOf(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	plansMu.Lock()
	defer plansMu.Unlock()
	building := map[reflect.Type]*plan{}
	p := buildPlan(t, building)
	for bt, bp := range building {
		plans.Store(bt, bp)
	}
	return p
}

// buildPlan makes t's plan and those of its parts, recording each in
// building before its parts so that a recursive type's plan calls itself.
func buildPlan(t reflect.Type, building map[reflect.Type]*plan) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	if p, ok := building[t]; ok {
		return p
	}
	p := &plan{}
	building[t] = p
	if infoOf(t).flat {
		p.copy = copyValue
		return p
	}
	switch t.Kind() {
	case reflect.Array:
		e := buildPlan(t.Elem(), building)
		p.copy = func(dst, src reflect.Value) {
			for i := range src.Len() {
				e.copy(dst.Index(i), src.Index(i))
			}
		}
	case reflect.Slice:
		e := buildPlan(t.Elem(), building)
		eflat := infoOf(t.Elem()).flat
		p.copy = func(dst, src reflect.Value) {
			if src.IsNil() {
				dst.SetZero()
				return
			}
			n := src.Len()
			s := reflect.MakeSlice(t, n, n)
			if eflat {
				reflect.Copy(s, src)
			} else {
				for i := range n {
					e.copy(s.Index(i), src.Index(i))
				}
			}
			dst.Set(s)
		}
	case reflect.Pointer:
		e := buildPlan(t.Elem(), building)
		p.copy = func(dst, src reflect.Value) {
			if src.IsNil() {
				dst.SetZero()
				return
			}
			n := reflect.New(t.Elem())
			e.copy(n.Elem(), src.Elem())
			dst.Set(n)
		}
	case reflect.Map:
		kt, et := t.Key(), t.Elem()
		k, e := buildPlan(kt, building), buildPlan(et, building)
		kflat, eflat := infoOf(kt).flat, infoOf(et).flat
		p.copy = func(dst, src reflect.Value) {
			if src.IsNil() {
				dst.SetZero()
				return
			}
			m := reflect.MakeMapWithSize(t, src.Len())
			it := src.MapRange()
			for it.Next() {
				kv, ev := it.Key(), it.Value()
				if !kflat {
					nk := reflect.New(kt).Elem()
					k.copy(nk, kv)
					kv = nk
				}
				if !eflat {
					ne := reflect.New(et).Elem()
					e.copy(ne, ev)
					ev = ne
				}
				m.SetMapIndex(kv, ev)
			}
			dst.Set(m)
		}
	case reflect.Interface:
		p.copy = func(dst, src reflect.Value) {
			if src.IsNil() {
				dst.SetZero()
				return
			}
			e := src.Elem()
			ne := reflect.New(e.Type()).Elem()
			planOf(e.Type()).copy(ne, e) // another type's plan: built apart
			dst.Set(ne)
		}
	case reflect.Struct:
		// Unexported fields are flat (examine refuses the type otherwise):
		// the whole-value copy carries them; exported ones that hold
		// references are then replaced by copies of their own.
		type deepField struct {
			i int
			p *plan
		}
		var deep []deepField
		for i := range t.NumField() {
			f := t.Field(i)
			if f.IsExported() && !infoOf(f.Type).flat {
				deep = append(deep, deepField{i, buildPlan(f.Type, building)})
			}
		}
		p.copy = func(dst, src reflect.Value) {
			dst.Set(src)
			for _, f := range deep {
				f.p.copy(dst.Field(f.i), src.Field(f.i))
			}
		}
	}
	return p
}

// interfaceCopyable reports whether every dynamic value inside v (a value
// of a copyable type) has a copyable type too: interfaces are checked when
// a value is cached, as their types are only known then.
func interfaceCopyable(v reflect.Value) bool {
	t := v.Type()
	inf := infoOf(t)
	if !inf.copyable {
		return false
	}
	if !inf.ifaces {
		return true
	}
	switch t.Kind() {
	case reflect.Array, reflect.Slice:
		for i := range v.Len() {
			if !interfaceCopyable(v.Index(i)) {
				return false
			}
		}
	case reflect.Pointer:
		return v.IsNil() || interfaceCopyable(v.Elem())
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if !interfaceCopyable(it.Key()) || !interfaceCopyable(it.Value()) {
				return false
			}
		}
	case reflect.Interface:
		return v.IsNil() || interfaceCopyable(v.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			// Unexported fields are flat: they hold no interface.
			if t.Field(i).IsExported() && !interfaceCopyable(v.Field(i)) {
				return false
			}
		}
	}
	return true
}

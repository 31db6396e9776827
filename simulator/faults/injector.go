package faults

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// Injector decides, operation by operation, which faults fire. Each seam
// calls Next once per operation, in the order operations happen; in a
// deterministic simulation that order, and so every decision, is a function
// of the seed.
//
// A random injector (NewRandom) draws each kind from its own stream, derived
// from the seed and the kind's name: changing one kind's rate never moves
// another kind's faults. A scripted injector (NewScripted) fires exactly the
// faults of a Schedule. Fired returns what fired, as a Schedule that a
// scripted injector replays; that is what a failure prints and what
// shrinking reduces.
//
// An Injector is safe for concurrent use; the lock is never held across a
// blocking call.
type Injector struct {
	mu       sync.Mutex
	spec     Spec
	rngs     map[Kind]*rand.Rand // random mode
	script   map[Seam]map[int][]Fault
	byName   map[nameKey][]Fault // scripted faults with Nth, by seam, name and rank
	counters map[Seam]int
	named    map[seamName]int // operations counted per seam and name
	fired    Schedule
	healed   bool
}

// NewRandom returns an injector drawing faults at spec's rates from streams
// derived from seed.
func NewRandom(spec Spec, seed uint64) *Injector {
	in := &Injector{spec: spec, rngs: map[Kind]*rand.Rand{}, counters: map[Seam]int{}, named: map[seamName]int{}}
	for k := range spec.Rates {
		in.rngs[k] = rand.New(rand.NewPCG(seed, rt.StreamSeed(seed, "faults/"+string(k))))
	}
	return in
}

// NewScripted returns an injector firing exactly the faults of s.
func NewScripted(s Schedule) *Injector {
	in := &Injector{script: map[Seam]map[int][]Fault{}, byName: map[nameKey][]Fault{}, counters: map[Seam]int{},
		named: map[seamName]int{}}
	for _, f := range s.Sorted() {
		seam := f.Kind.Seam()
		if f.Nth > 0 && f.On != "" {
			k := nameKey{seam, f.On, f.Nth}
			in.byName[k] = append(in.byName[k], f)
			continue
		}
		if in.script[seam] == nil {
			in.script[seam] = map[int][]Fault{}
		}
		in.script[seam][f.At] = append(in.script[seam][f.At], f)
	}
	return in
}

// Next counts one operation on seam, named on (CPI method, agent method,
// subject, VM CID), and returns the faults that fire on it, in canonical
// kind order (at most one of each kind). nil: none.
func (in *Injector) Next(seam Seam, on string) []Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	at := in.counters[seam]
	in.counters[seam] = at + 1
	sn := seamName{seam, on}
	in.named[sn]++
	nth := in.named[sn]
	if in.healed {
		return nil
	}
	var out []Fault
	if in.script != nil {
		for _, f := range in.script[seam][at] {
			if f.On == "" || f.On == on {
				out = append(out, f)
			}
		}
		for _, f := range in.byName[nameKey{seam, on, nth}] {
			f.At = at
			out = append(out, f)
		}
		slices.SortStableFunc(out, compareFaults)
	} else {
		for _, k := range Kinds {
			r, ok := in.spec.Rates[k]
			if !ok || k.Seam() != seam {
				continue
			}
			if f, ok := in.draw(k, r, at, on); ok {
				out = append(out, f)
			}
		}
	}
	for i := range out {
		if out[i].On != "" {
			out[i].Nth = nth
		}
	}
	in.fired = append(in.fired, out...)
	return out
}

type seamName struct {
	seam Seam
	name string
}

type nameKey struct {
	seam Seam
	name string
	nth  int
}

// draw decides one kind at one operation. The stream's draws depend only on
// how many operations of the seam came before.
func (in *Injector) draw(k Kind, r Rate, at int, on string) (Fault, bool) {
	rng := in.rngs[k]
	if rng.Float64() >= r.P {
		return Fault{}, false
	}
	f := Fault{Kind: k, At: at, On: on}
	if k.HasDuration() {
		f.Duration = r.Min + time.Duration(rng.Int64N(int64(r.Max-r.Min)+1))
	}
	if k == CPIError {
		f.OkToRetry = rng.IntN(2) == 1
		switch {
		case f.OkToRetry && on == "create_vm":
			f.ErrType = ErrVMCreationFailed
		case rng.IntN(2) == 0:
			f.ErrType = ErrCloudError
		default:
			f.ErrType = ErrCpiError
		}
	}
	return f, true
}

// Heal stops all faults: Next keeps counting but returns nil. Liveness
// checks run after Heal.
func (in *Injector) Heal() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.healed = true
}

// Fired returns the faults returned by Next so far, in firing order.
func (in *Injector) Fired() Schedule {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append(Schedule(nil), in.fired...)
}

// Count returns how many operations seam has counted.
func (in *Injector) Count(seam Seam) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.counters[seam]
}

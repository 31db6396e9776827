package faults

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate is how often one kind fires: with probability P at each operation of
// its seam, with a Duration drawn uniformly from [Min, Max] for kinds that
// take one.
type Rate struct {
	// P is the probability per operation, in [0, 1].
	P float64
	// Min and Max bound the drawn Duration (inclusive); zero for kinds
	// without one.
	Min, Max time.Duration
}

// Spec gives the rate of each kind: what `--faults SPEC` says. Its text form
// is comma-separated kind=P entries, with :MIN..MAX for kinds that take a
// duration (default range: Kind.DefaultRange):
//
//	cpi-error=0.05,lost-response=0.02,latency=0.1:1ms..2s
//
// "none" (or "") is the empty spec and "default" is DefaultSpec; "default"
// among other entries stands for DefaultSpec's entries, and a kind named
// beside it keeps the rate named (default,lock-renewal-stall=0.01 adds
// one kind to the default mix). Kinds not named never fire.
type Spec struct {
	// Rates holds the rate of each kind that can fire.
	Rates map[Kind]Rate
}

// DefaultSpec is a mix of every kind, light enough that most operations
// succeed. Cloud outages are rare (0.002 a CPI call, 5 s to 1 min): enough
// that a sweep reaches the paths where a disk call finally fails after the
// Director's in-doubt retries, without slowing it. There a delete or
// detach keeps its record, as upstream's jobs do, a VM operation keeps the
// attachment it could not detach, and the reference's undo of a failed
// attach that fails too keeps the disk on its VM, in doubt; the records
// check allows each until the next operation on the name settles it.
func DefaultSpec() Spec {
	s, err := ParseSpec("cpi-error=0.02,lost-response=0.01,latency=0.05,director-crash=0.002," +
		"agent-unresponsive=0.01,agent-restart=0.005,agent-old=0.05,vm-restart-on-attach=0.1," +
		"mbus-lost=0.01,mbus-delay=0.05,cpi-outage=0.002")
	if err != nil {
		panic(err)
	}
	return s
}

// ParseSpec reads the text form of a Spec.
func ParseSpec(text string) (Spec, error) {
	text = strings.TrimSpace(text)
	switch text {
	case "", "none":
		return Spec{}, nil
	case "default":
		return DefaultSpec(), nil
	}
	s := Spec{Rates: map[Kind]Rate{}}
	named := map[Kind]bool{}
	withDefault := false
	for _, entry := range strings.Split(text, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "default" {
			if withDefault {
				return Spec{}, fmt.Errorf("fault spec: default given twice")
			}
			withDefault = true
			continue
		}
		name, val, ok := strings.Cut(entry, "=")
		if !ok {
			return Spec{}, fmt.Errorf("fault spec entry %q: want kind=probability", entry)
		}
		k := Kind(strings.TrimSpace(name))
		if !k.Valid() {
			return Spec{}, fmt.Errorf("fault spec entry %q: unknown kind %q (known: %s)", entry, k, kindList())
		}
		if named[k] {
			return Spec{}, fmt.Errorf("fault spec: %s given twice", k)
		}
		named[k] = true
		pText, rng, hasRange := strings.Cut(val, ":")
		p, err := strconv.ParseFloat(strings.TrimSpace(pText), 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) || p < 0 || p > 1 {
			return Spec{}, fmt.Errorf("fault spec entry %q: probability %q is not a number in [0, 1]", entry, pText)
		}
		r := Rate{P: p}
		r.Min, r.Max = k.DefaultRange()
		if hasRange {
			if !k.HasDuration() {
				return Spec{}, fmt.Errorf("fault spec entry %q: %s takes no duration range", entry, k)
			}
			lo, hi, ok := strings.Cut(rng, "..")
			if !ok {
				return Spec{}, fmt.Errorf("fault spec entry %q: want range MIN..MAX, got %q", entry, rng)
			}
			if r.Min, err = time.ParseDuration(strings.TrimSpace(lo)); err == nil {
				r.Max, err = time.ParseDuration(strings.TrimSpace(hi))
			}
			if err != nil || r.Min < 0 || r.Max < r.Min {
				return Spec{}, fmt.Errorf("fault spec entry %q: range %q is not MIN..MAX with 0 ≤ MIN ≤ MAX", entry, rng)
			}
		}
		s.Rates[k] = r
	}
	if withDefault {
		for k, r := range DefaultSpec().Rates {
			if !named[k] {
				s.Rates[k] = r
			}
		}
	}
	return s, nil
}

// String is the canonical text form: kinds in canonical order, ranges
// always written for kinds that take one, "none" for the empty spec.
func (s Spec) String() string {
	var parts []string
	for _, k := range Kinds {
		r, ok := s.Rates[k]
		if !ok {
			continue
		}
		e := string(k) + "=" + strconv.FormatFloat(r.P, 'g', -1, 64)
		if k.HasDuration() {
			e += ":" + r.Min.String() + ".." + r.Max.String()
		}
		parts = append(parts, e)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// Set parses text into s, so a *Spec is a flag.Value.
func (s *Spec) Set(text string) error {
	v, err := ParseSpec(text)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Equal reports whether two specs give every kind the same rate.
func (s Spec) Equal(o Spec) bool {
	if len(s.Rates) != len(o.Rates) {
		return false
	}
	for k, r := range s.Rates {
		if o.Rates[k] != r {
			return false
		}
	}
	return true
}

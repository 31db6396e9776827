package simulator

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// A point names a place calls pass: "cpi:<method>" (a CPI call from the
// director) or "agent:<method>" (an agent request from the director).

// GateSpec is a scripted hold on a point, for scenarios that force one
// interleaving:
//
//	barrier at=cpi:create_disk n=2 timeout=30s
//	hold at=agent:stop until=c1 timeout=30s
//
// A barrier holds the first N calls at the point until N have arrived or
// each has waited Timeout. A hold keeps the first call at the point until
// client Until has finished all its operations, or Timeout has passed.
type GateSpec struct {
	// Kind is "barrier" or "hold".
	Kind string
	// At is the point.
	At string
	// N is a barrier's count (default 2).
	N int
	// Until is the client a hold waits for (a hold).
	Until int
	// Timeout bounds each wait (default 30 s).
	Timeout time.Duration
}

// String is the gate's line in a scenario.
func (g GateSpec) String() string {
	if g.Kind == "barrier" {
		return fmt.Sprintf("barrier at=%s n=%d timeout=%s", g.At, g.N, g.Timeout)
	}
	return fmt.Sprintf("hold at=%s until=c%d timeout=%s", g.At, g.Until, g.Timeout)
}

// ParseGate reads a gate line.
func ParseGate(line string) (GateSpec, error) {
	f := strings.Fields(line)
	if len(f) == 0 || (f[0] != "barrier" && f[0] != "hold") {
		return GateSpec{}, fmt.Errorf("gate %q: want barrier or hold", line)
	}
	g := GateSpec{Kind: f[0], N: 2, Timeout: 30 * time.Second}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return GateSpec{}, fmt.Errorf("gate %q: want key=value, got %q", line, kv)
		}
		var err error
		switch k {
		case "at":
			g.At = v
		case "n":
			g.N, err = strconv.Atoi(v)
		case "until":
			g.Until, err = parseClient(v)
		case "timeout":
			g.Timeout, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return GateSpec{}, fmt.Errorf("gate %q: %v", line, err)
		}
	}
	if !strings.HasPrefix(g.At, "cpi:") && !strings.HasPrefix(g.At, "agent:") {
		return GateSpec{}, fmt.Errorf("gate %q: at=%q is not cpi:<method> or agent:<method>", line, g.At)
	}
	return g, nil
}

// Gates are the live gates of one run, and the points reached so far.
// A nil *Gates holds nothing.
type Gates struct {
	r       rt.Runtime
	mu      sync.Mutex // a leaf lock, never held across a scheduling point
	specs   []GateSpec
	arrived []int // guarded by mu; per spec
	open    []*rt.Event
	reached map[string]*rt.Event // guarded by mu
}

// NewGates makes the gates of specs on r.
func NewGates(r rt.Runtime, specs []GateSpec) *Gates {
	g := &Gates{r: r, specs: specs, arrived: make([]int, len(specs)), reached: map[string]*rt.Event{}}
	for range specs {
		g.open = append(g.open, rt.NewEvent(r))
	}
	return g
}

func (g *Gates) point(p string) *rt.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.reached[p]
	if !ok {
		e = rt.NewEvent(g.r)
		g.reached[p] = e
	}
	return e
}

// enter is called by a call passing point p: it marks p reached and waits
// at the gates on p.
func (g *Gates) enter(p string) {
	if g == nil {
		return
	}
	g.point(p).Set()
	for i, s := range g.specs {
		if s.At != p {
			continue
		}
		g.mu.Lock()
		g.arrived[i]++
		n := g.arrived[i]
		g.mu.Unlock()
		switch s.Kind {
		case "barrier":
			if n > s.N {
				continue
			}
			if n == s.N {
				g.open[i].Set()
				continue
			}
			g.open[i].Wait(s.Timeout)
		case "hold":
			if n == 1 {
				g.open[i].Wait(s.Timeout)
			}
		}
	}
}

// reachedWithin waits until point p has been reached, or timeout.
func (g *Gates) reachedWithin(p string, timeout time.Duration) bool {
	if g == nil {
		return true
	}
	return g.point(p).Wait(timeout)
}

// clientDone releases the holds waiting for client c.
func (g *Gates) clientDone(c int) {
	if g == nil {
		return
	}
	for i, s := range g.specs {
		if s.Kind == "hold" && s.Until == c {
			g.open[i].Set()
		}
	}
}

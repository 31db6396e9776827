package simulator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// Workload shapes: what a seeded workload does to reach contention. The
// default, ShapeMixed, draws per seed which features a run gets, so a sweep
// covers each; the others pin one feature (`cpilab simulate --workload
// NAME`).
const (
	// ShapeMixed draws every feature below per seed, each on with
	// probability 1/2 (a re-attaching recreate of two disks 1/4), and 1
	// to 16 clients.
	ShapeMixed = "mixed"
	// ShapeLight is none of them: 3 clients that wait for every task.
	ShapeLight = "light"
	// ShapeManyClients is 16 clients.
	ShapeManyClients = "many-clients"
	// ShapeNoWait: half the operations are issued without waiting for
	// their task.
	ShapeNoWait = "no-wait"
	// ShapeBurst: bursts of provides, attaches and detaches of one disk
	// name on one instance by several clients at once.
	ShapeBurst = "burst"
	// ShapeSlowCPI: a lock lease of 20 s and CPI calls that take from half
	// to one and a half of it, so that a job holds its locks over several
	// leases and one CPI call (or an agent wait, up to 30 s) may outlast a
	// lease: only the Director's timer renewal (every lease/2) keeps its
	// locks, and a Director that lets a lease lapse mid-call lets another
	// job change what this one is changing.
	ShapeSlowCPI = "slow-cpi"
	// ShapeDeepQueue: one dynamic-disk worker, clients that do not wait,
	// and bursts: the queue holds more tasks than there are workers.
	ShapeDeepQueue = "deep-queue"
	// ShapeVMOps: bursts end with a recreate, hard stop or VM delete of
	// the instance the burst's provides name; and one client provides two
	// disks of its own to an instance and recreates it, re-attaching them.
	ShapeVMOps = "vm-ops"
	// ShapeMove: bursts span two instances and two disk names, with
	// deletes among them, and four dynamic-disk workers: a disk moves
	// from one instance to the other (detach, then provide elsewhere)
	// while a detach or delete that looked it up on the first waits for
	// its lock, and other disks of the second are worked on meanwhile.
	ShapeMove = "move"
)

// Shapes lists the shape names, the default first.
var Shapes = []string{ShapeMixed, ShapeLight, ShapeManyClients, ShapeNoWait, ShapeBurst, ShapeSlowCPI, ShapeDeepQueue, ShapeVMOps, ShapeMove}

// Shape is what a workload shape drew for one seed.
type Shape struct {
	// Name is the shape's name.
	Name string
	// Clients is the number of clients.
	Clients int
	// NoWait is the probability that an operation does not wait for its
	// task.
	NoWait float64
	// Burst is the probability that a step starts a burst.
	Burst float64
	// VMOps: bursts end with a VM operation on their instance.
	VMOps bool
	// LockLease is the director's lock lease (0: its default, 240 s).
	LockLease time.Duration
	// SlowCPI is the probability that a CPI call takes from LockLease/2 to
	// 3·LockLease/2.
	SlowCPI float64
	// DiskWorkers is the number of dynamic-disk workers (0: the director's
	// default, 2).
	DiskWorkers int
	// Reattach: once in the run, one client provides two disk names of
	// their own (no other operation names them) to one instance, then
	// recreates it with reattach_dynamic_disks, waiting for each: an OK
	// recreate then must have re-attached both (checkReattached).
	Reattach bool
	// Move: bursts span two instances and two disk names.
	Move bool
}

// String lists what the shape drew, for reports.
func (s Shape) String() string {
	parts := []string{fmt.Sprintf("%s: %d clients", s.Name, s.Clients)}
	if s.NoWait > 0 {
		parts = append(parts, fmt.Sprintf("no-wait %.2f", s.NoWait))
	}
	if s.Burst > 0 {
		parts = append(parts, fmt.Sprintf("bursts %.2f", s.Burst))
	}
	if s.VMOps {
		parts = append(parts, "VM operations in bursts")
	}
	if s.SlowCPI > 0 {
		parts = append(parts, fmt.Sprintf("slow CPI %.2f, lease %s", s.SlowCPI, s.LockLease))
	}
	if s.Move {
		parts = append(parts, "bursts over two instances and two names")
	}
	if s.Reattach {
		parts = append(parts, "a re-attaching recreate of two disks")
	}
	if s.DiskWorkers > 0 {
		parts = append(parts, fmt.Sprintf("%d disk workers", s.DiskWorkers))
	}
	return strings.Join(parts, ", ")
}

// Shape parameters.
const (
	slowLease    = 20 * time.Second
	maxClients   = 16
	defaultLight = 3
	moveWorkers  = 4
)

// DrawShape draws the shape of cfg for the workload seed, on its own
// stream ("workload/shape"). An explicit cfg.Clients wins over the draw.
func DrawShape(cfg WorkloadConfig, seed uint64) (Shape, error) {
	cfg = cfg.withDefaults()
	if !slices.Contains(Shapes, cfg.Shape) {
		return Shape{}, fmt.Errorf("workload %q: want one of %s", cfg.Shape, strings.Join(Shapes, ", "))
	}
	rng := rand.New(rand.NewPCG(seed, rt.StreamSeed(seed, "workload/shape")))
	sh := Shape{Name: cfg.Shape, Clients: defaultLight}
	noWait := func() { sh.NoWait = 0.5 }
	burst := func() { sh.Burst = 0.15 }
	slow := func() { sh.LockLease, sh.SlowCPI = slowLease, 0.1 }
	deep := func() { sh.DiskWorkers = 1; sh.NoWait = max(sh.NoWait, 0.5); sh.Burst = max(sh.Burst, 0.15) }
	vmOps := func() { sh.VMOps = true; sh.Burst = max(sh.Burst, 0.15) }
	move := func() {
		sh.Move, sh.Burst = true, max(sh.Burst, 0.15)
		if sh.DiskWorkers == 0 { // a deep queue keeps its one worker
			sh.DiskWorkers = moveWorkers
		}
	}
	switch cfg.Shape {
	case ShapeMixed:
		sh.Clients = 1 + rng.IntN(maxClients)
		for _, f := range []func(){noWait, burst, slow, deep, vmOps, move} {
			if rng.IntN(2) == 0 {
				f()
			}
		}
		// Drawn after the others, so that they stay as they were.
		sh.Reattach = rng.IntN(4) == 0
	case ShapeManyClients:
		sh.Clients = maxClients
	case ShapeNoWait:
		noWait()
	case ShapeBurst:
		sh.Clients = 8
		burst()
	case ShapeSlowCPI:
		slow()
	case ShapeDeepQueue:
		sh.Clients = 8
		deep()
	case ShapeVMOps:
		sh.Clients = 8
		vmOps()
		sh.Reattach = true
	case ShapeMove:
		sh.Clients = 8
		move()
	}
	if cfg.Clients > 0 {
		sh.Clients = cfg.Clients
	}
	return sh, nil
}

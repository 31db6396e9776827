package dynamicdisks

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	"pgregory.net/rapid"
)

// Explore bounds the random lifecycles of the explore spec: rapid state
// machine runs over the model, each on names of its own, whose failures
// rapid shrinks to a short sequence of requests. The default is a small
// seeded budget; `certify-director --explore` gives a large one.
type Explore struct {
	// Runs is the number of lifecycles (default 1; below 0: none).
	Runs int
	// Steps is the average number of requests of one lifecycle (default
	// 8).
	Steps int
	// Seed seeds the first lifecycle (default 1: the same lifecycles every
	// run; give the seed a failure printed to replay it).
	Seed uint64
}

func (e Explore) withDefaults() Explore {
	if e.Runs == 0 {
		e.Runs = 1
	}
	if e.Steps <= 0 {
		e.Steps = 8
	}
	if e.Seed == 0 {
		e.Seed = 1
	}
	return e
}

// failHook, when set, receives the violations instead of failing the spec
// (the explore spec turns them into rapid failures, which rapid shrinks).
// Specs run one at a time; only the explore spec sets it.
var failHook func(Violation)

// exploreFailure carries a violation out of a lifecycle step.
type exploreFailure struct{ v Violation }

func exploreSpecs(r *run) {
	It(ClauseExplore, labels("explore", "provide", "create", "attach", "detach", "delete", "list"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		ex := r.cfg.Explore
		if ex.Runs < 0 {
			Skip("not checked: random lifecycles: the explore budget is off")
		}
		if !flag.Parsed() {
			// Outside go test (certify-director): rapid reads testing's
			// flags, which a plain binary has neither registered nor parsed.
			testing.Init()
			_ = flag.CommandLine.Parse(nil)
		}
		for name, v := range map[string]string{"rapid.checks": strconv.Itoa(ex.Runs), "rapid.steps": strconv.Itoa(ex.Steps),
			"rapid.seed": strconv.FormatUint(ex.Seed, 10), "rapid.nofailfile": "true"} {
			if err := flag.Set(name, v); err != nil {
				Fail(fmt.Sprintf("explore: setting %s: %v", name, err))
			}
		}
		failHook = func(v Violation) { panic(exploreFailure{v}) }
		DeferCleanup(func() { failHook = nil })
		AddReportEntry("explore", fmt.Sprintf("%d lifecycles of about %d requests, seed %d (replay: certify-director --explore-seed %d)",
			ex.Runs, ex.Steps, ex.Seed, ex.Seed))
		n := 0
		rapid.Check(GinkgoT(), func(t *rapid.T) {
			n++
			r.lifecycle(ctx, t, n)
		})
	})
}

// lifecycle is one random run: requests drawn over three names of its own,
// the suite's instances (one in another AZ, one of another deployment when
// there are) and an instance that does not exist, each judged and followed
// by a comparison of the whole state with the model. Its disks are deleted
// at the end.
func (r *run) lifecycle(ctx context.Context, t *rapid.T, n int) {
	names := []string{r.mname(fmt.Sprintf("x%d-a", n)), r.mname(fmt.Sprintf("x%d-b", n)), r.mname(fmt.Sprintf("x%d-c", n))}
	insts := []string{r.a.ID, r.b.ID, r.cfg.RunID + "-no-such-instance"}
	if c, ok := r.otherAZ(); ok {
		insts = append(insts, c.ID)
	}
	if d, ok := r.otherDeployment(); ok {
		insts = append(insts, d.ID)
	}
	azs := []string{r.a.AZ}
	for _, in := range r.insts {
		if in.AZ != r.a.AZ && in.Deployment == r.deployment {
			azs = append(azs, in.AZ)
			break
		}
	}
	defer r.tidy(ctx, names)
	pool, size := r.cfg.DiskPool, r.cfg.DiskSizeMiB
	name := rapid.SampledFrom(names)
	inst := rapid.SampledFrom(insts)
	meta := rapid.SampledFrom([]map[string]string{nil, {"k": "1"}, {"k": "2", "extra": "x"}})
	t.Repeat(map[string]func(*rapid.T){
		"provide": func(t *rapid.T) {
			r.exploreStep(ctx, t, Op{Kind: OpProvide, Name: name.Draw(t, "name"), Instance: inst.Draw(t, "instance"),
				Pool: pool, SizeMiB: size, Metadata: meta.Draw(t, "metadata")})
		},
		"create": func(t *rapid.T) {
			r.exploreStep(ctx, t, Op{Kind: OpCreate, Name: name.Draw(t, "name"), Deployment: r.deployment,
				AZ: rapid.SampledFrom(azs).Draw(t, "az"), Pool: pool, SizeMiB: size, Metadata: meta.Draw(t, "metadata")})
		},
		"attach": func(t *rapid.T) {
			r.exploreStep(ctx, t, Op{Kind: OpAttach, Name: name.Draw(t, "name"), Instance: inst.Draw(t, "instance")})
		},
		"detach": func(t *rapid.T) { r.exploreStep(ctx, t, Op{Kind: OpDetach, Name: name.Draw(t, "name")}) },
		"delete": func(t *rapid.T) {
			op := Op{Kind: OpDelete, Name: name.Draw(t, "name")}
			if d := r.m.Disks[op.Name]; d != nil && d.Instance != "" {
				// DELETE of an attached disk is race (e)'s spec: detach first.
				r.exploreStep(ctx, t, Op{Kind: OpDetach, Name: op.Name})
			}
			r.exploreStep(ctx, t, op)
		},
	})
}

// exploreStep is step, its violation a rapid failure (shrunk by rapid).
func (r *run) exploreStep(ctx context.Context, t *rapid.T, op Op) {
	t.Logf("%s", op)
	defer func() {
		if p := recover(); p != nil {
			if f, ok := p.(exploreFailure); ok {
				t.Fatalf("%s", f.v)
			}
			panic(p)
		}
	}()
	r.step(ctx, ClauseExplore, op)
}

// tidy detaches and deletes a lifecycle's disks, moving the model on,
// whatever the director answers (the lifecycle's checks are done).
func (r *run) tidy(ctx context.Context, names []string) {
	for _, n := range names {
		if r.m.Disks[n] == nil {
			continue
		}
		for _, op := range []Op{{Kind: OpDetach, Name: n}, {Kind: OpDelete, Name: n}} {
			x := r.sendOp(ctx, op)
			if id := x.taskID(); id != 0 {
				_, _ = r.s.waitTask(ctx, id, r.cfg.Timeouts.Task)
			}
		}
		r.apply(Op{Kind: OpDelete, Name: n}, true, "")
	}
}

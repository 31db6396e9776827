package fakeiaas_test

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/rt"
)

func TestFaultRuleTextRoundTrip(t *testing.T) {
	rules := []fakeiaas.Rule{
		{Effect: fakeiaas.Effect{Kind: fakeiaas.EffectPause}},
		{ID: "r7", Op: fakeiaas.OpAttachDisk, Target: "vm-1", Nth: 2, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectError,
			ErrorType: cpiv2.TypeDiskNotFound, OkToRetry: true, Message: `boom "quoted" = x\y`}},
		{Op: fakeiaas.OpCreateVM, Prob: 0.25, Times: 3, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectRateLimit, Delay: 50 * time.Millisecond}},
		{Op: fakeiaas.OpDetachDisk, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectLatency, Delay: 1500 * time.Microsecond}},
		{Op: fakeiaas.OpRegistryGet, Target: "odd target", Effect: fakeiaas.Effect{Kind: fakeiaas.EffectLoseResponse}},
		{Effect: fakeiaas.Effect{Kind: fakeiaas.EffectError, ErrorType: cpiv2.TypeInvalidCall, Message: "ünïcode\ttab"}},
	}
	for _, r := range rules {
		line := r.String()
		got, err := fakeiaas.ParseRule(line)
		if err != nil {
			t.Fatalf("ParseRule(%q): %v", line, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v\n via %q\n gave %+v", r, line, got)
		}
		if got.String() != line {
			t.Fatalf("printing is not stable: %q then %q", line, got.String())
		}
	}
	short, err := fakeiaas.ParseRule("op=delete_vm effect=error type=VMNotFound")
	if err != nil || short.Effect.ErrorType != cpiv2.TypeVMNotFound {
		t.Fatalf("short error type: %+v, %v", short, err)
	}
	all, err := fakeiaas.ParseRules("# schedule\n\nop=create_vm effect=pause\n  op=delete_vm nth=1 effect=lose_response  \n")
	if err != nil || len(all) != 2 {
		t.Fatalf("ParseRules = %+v, %v", all, err)
	}
}

func TestFaultRuleParseErrors(t *testing.T) {
	for _, bad := range []string{
		"", "op=create_vm", "op=nope effect=pause", "effect=explode", "effect=latency", "effect=pause nth=-1",
		"effect=pause prob=2", "effect=pause prob=NaN", "effect=pause nth=x", `effect=error message="unterminated`, "effect=pause effect=pause",
		"effect=pause color=red", "justaword effect=pause", "effect=latency delay=fast",
	} {
		if r, err := fakeiaas.ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestFaultEffects(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, nil)
	d := mustDisk(t, c, 1)

	// error on the 2nd matching call only, typed, ok_to_retry.
	r, err := c.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpSetDiskMetadata, Target: d.CID.String(), Nth: 2,
		Effect: fakeiaas.Effect{Kind: fakeiaas.EffectError, ErrorType: cpiv2.TypeDiskNotFound, OkToRetry: true}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == "" {
		t.Fatal("AddFault assigned no ID")
	}
	for i := 1; i <= 3; i++ {
		err := c.SetDiskMetadata(bg, d.CID, cpiv2.Metadata{"i": "x"})
		if i == 2 {
			wantErr(t, "injected error", err, cpiv2.ErrDiskNotFound, fakeiaas.ErrInjected)
			var ce *cpiv2.Error
			if errors.As(err, &ce); !ce.OkToRetry {
				t.Fatalf("injected error lost ok_to_retry: %v", err)
			}
		} else if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	h, _ := c.History(bg, fakeiaas.HistoryFilter{Op: fakeiaas.OpSetDiskMetadata}, 0)
	if len(h) != 3 || len(h[1].Faults) != 1 || h[1].Faults[0] != r.ID || h[1].Result != string(cpiv2.TypeDiskNotFound) {
		t.Fatalf("history of the faulted calls = %+v", h)
	}

	// A target matches the disk of an attach as well as the VM.
	if _, err := c.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpAttachDisk, Target: d.CID.String(), Times: 1,
		Effect: fakeiaas.Effect{Kind: fakeiaas.EffectError, ErrorType: cpiv2.TypeVMCreationFailed}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AttachDisk(bg, vm.CID, d.CID)
	wantErr(t, "attach with a disk-targeted fault", err, cpiv2.ErrVMCreationFailed, fakeiaas.ErrInjected)

	// lose_response: applied, but the caller gets an error.
	if _, err := c.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpAttachDisk, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectLoseResponse}, Times: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AttachDisk(bg, vm.CID, d.CID)
	if !errors.Is(err, fakeiaas.ErrResponseLost) {
		t.Fatalf("lose_response: %v", err)
	}
	if got, _ := c.Disk(bg, d.CID); got.VMCID != vm.CID {
		t.Fatalf("lose_response did not apply the attach: %+v", got)
	}

	// rate limit: nothing applied.
	if _, err := c.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpCreateDisk, Times: 1, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectRateLimit, Delay: time.Second}}); err != nil {
		t.Fatal(err)
	}
	before, _ := c.State(bg)
	_, err = c.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1})
	var fe *fakeiaas.Error
	if !errors.As(err, &fe) || fe.Code != fakeiaas.CodeRateLimited || fe.RetryAfter != time.Second {
		t.Fatalf("rate limit: %v", err)
	}
	after, _ := c.State(bg)
	if len(after.Disks) != len(before.Disks) {
		t.Fatal("a rate-limited create_disk created a disk")
	}
	if _, err := c.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1}); err != nil {
		t.Fatalf("times=1 rule fired twice: %v", err)
	}
}

func TestFaultPauseUntilReleased(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	r, err := c.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpCreateVM, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectPause}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.CreateVM(bg, fakeiaas.VMSpec{AgentID: "a", StemcellCID: sc.CID})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, _ := c.Faults(bg)
		if len(l) == 1 && l[0].Paused == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("call never paused: %+v", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("paused call returned before release: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if s, _ := c.State(bg); len(s.VMs) != 0 {
		t.Fatal("a paused create_vm was applied before release")
	}
	if err := c.ReleaseFault(bg, r.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("released call: %v", err)
	}
	if s, _ := c.State(bg); len(s.VMs) != 1 {
		t.Fatal("released create_vm was not applied")
	}
	wantErr(t, "release of an unknown rule", c.ReleaseFault(bg, "nope"), cpiv2.ErrCloudError, fakeiaas.ErrNotFound)
}

func TestFaultProbabilityIsSeeded(t *testing.T) {
	run := func(seed uint64) []bool {
		c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: "memory", Runtime: rt.Real(seed)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpCreateDisk, Prob: 0.5, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectError}}); err != nil {
			t.Fatal(err)
		}
		var out []bool
		for range 64 {
			_, err := c.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1})
			out = append(out, err != nil)
		}
		return out
	}
	a, b := run(9), run(9)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different fault decisions")
	}
	n := 0
	for _, x := range a {
		if x {
			n++
		}
	}
	if n == 0 || n == len(a) {
		t.Fatalf("prob=0.5 fired %d of %d times", n, len(a))
	}
	if reflect.DeepEqual(a, run(10)) {
		t.Fatal("different seeds gave identical fault decisions over 64 calls")
	}
}

func TestDeterministicCIDs(t *testing.T) {
	mk := func() []string {
		c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: "memory", Runtime: rt.Real(3)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sc := mustStemcell(t, c, 2)
		vm := mustVM(t, c, sc, nil)
		d := mustDisk(t, c, 1)
		return []string{sc.CID.String(), vm.CID.String(), d.CID.String()}
	}
	a, b := mk(), mk()
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different CIDs: %v vs %v", a, b)
	}
	if a[1][:3] != "vm-" || a[2][:5] != "disk-" || a[0][:3] != "sc-" || len(a[2]) < 20 {
		t.Fatalf("CID shapes: %v", a)
	}
}

// sleepRecorder is a runtime whose clock only advances when slept on.
type sleepRecorder struct {
	rt.Runtime
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func (s *sleepRecorder) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *sleepRecorder) Sleep(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slept = append(s.slept, d)
	s.now = s.now.Add(d)
}

func TestLatencyUsesTheRuntimeClock(t *testing.T) {
	r := &sleepRecorder{Runtime: rt.Real(1), now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: "memory", Runtime: r})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpCreateDisk, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectLatency, Delay: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d, err := c.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("latency fault slept on the wall clock")
	}
	if len(r.slept) != 1 || r.slept[0] != time.Hour {
		t.Fatalf("runtime sleeps = %v, want [1h]", r.slept)
	}
	if want := time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC); !d.Created.Equal(want) {
		t.Fatalf("disk created at %v, want %v (runtime time after the latency)", d.Created, want)
	}
}

// FuzzParseRule: any line ParseRule accepts prints to a line that parses
// back to the same rule.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"effect=pause",
		`id=r1 op=attach_disk target=vm-1 nth=2 effect=error type=DiskNotFound ok_to_retry=true message="a \"b\""`,
		"op=create_vm prob=0.25 times=3 effect=rate_limit delay=50ms",
		"op=detach_disk effect=latency delay=1.5ms",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := fakeiaas.ParseRule(line)
		if err != nil {
			return
		}
		back, err := fakeiaas.ParseRule(r.String())
		if err != nil {
			t.Fatalf("%q parsed to %+v, whose text %q does not parse: %v", line, r, r.String(), err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("%q: %+v printed as %q parsed back as %+v", line, r, r.String(), back)
		}
	})
}

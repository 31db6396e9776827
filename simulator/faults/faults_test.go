package faults_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/simulator/faults"
	"pgregory.net/rapid"
)

func genFault() *rapid.Generator[faults.Fault] {
	return rapid.Custom(func(t *rapid.T) faults.Fault {
		f := faults.Fault{
			Kind: rapid.SampledFrom(faults.Kinds).Draw(t, "kind"),
			At:   rapid.IntRange(0, 1<<20).Draw(t, "at"),
			On:   rapid.SampledFrom([]string{"", "attach_disk", "agent.x", "a b", `q"uo;te,=#`, "vm-1"}).Draw(t, "on"),
		}
		if f.Kind == faults.CPIError {
			f.ErrType = rapid.SampledFrom([]string{faults.ErrCloudError, faults.ErrCpiError, "Weird Type"}).Draw(t, "type")
			f.OkToRetry = rapid.Bool().Draw(t, "retry")
		}
		if f.Kind.HasDuration() {
			f.Duration = time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "d"))
		}
		return f
	})
}

func TestScheduleRoundTrips(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := faults.Schedule(rapid.SliceOf(genFault()).Draw(t, "schedule"))
		text := s.String()
		back, err := faults.ParseSchedule(text)
		if err != nil {
			t.Fatalf("ParseSchedule(%q): %v", text, err)
		}
		if !slices.Equal(back, s.Sorted()) {
			t.Fatalf("round trip changed the schedule:\n%s\nread back as\n%s", text, back)
		}
		oneLine := strings.ReplaceAll(strings.TrimSuffix(text, "\n"), "\n", "; ")
		if back2, err := faults.ParseSchedule(oneLine); err != nil || !slices.Equal(back2, back) {
			t.Fatalf("the ;-separated form %q read back as %v, %v", oneLine, back2, err)
		}
	})
}

func TestSpecRoundTrips(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := faults.Spec{Rates: map[faults.Kind]faults.Rate{}}
		for _, k := range rapid.SliceOfDistinct(rapid.SampledFrom(faults.Kinds), func(k faults.Kind) faults.Kind { return k }).Draw(t, "kinds") {
			r := faults.Rate{P: rapid.Float64Range(0, 1).Draw(t, "p")}
			if k.HasDuration() {
				r.Min = time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "min"))
				r.Max = r.Min + time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "span"))
			}
			s.Rates[k] = r
		}
		back, err := faults.ParseSpec(s.String())
		if err != nil {
			t.Fatalf("ParseSpec(%q): %v", s, err)
		}
		if !back.Equal(s) || back.String() != s.String() {
			t.Fatalf("spec %q read back as %q", s, back)
		}
	})
}

func TestSpecText(t *testing.T) {
	s, err := faults.ParseSpec(" latency=0.1:10ms..2s , cpi-error=0.05,agent-old=1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "cpi-error=0.05,latency=0.1:10ms..2s,agent-old=1"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	var v faults.Spec
	if err := v.Set("mbus-delay=0.5"); err != nil || v.String() != "mbus-delay=0.5:1ms..5s" {
		t.Fatalf("Set: %v, %q (want the default range filled in)", err, v)
	}
	if d := faults.DefaultSpec(); len(d.Rates) != len(faults.Kinds)-1 {
		t.Fatalf("DefaultSpec names %d kinds, want all %d but lock-renewal-stall", len(d.Rates), len(faults.Kinds)-1)
	} else if r := d.Rates[faults.CPIOutage]; r.P <= 0 || r.P > 0.005 {
		t.Fatalf("DefaultSpec's cpi-outage rate %v: want a low one", r.P)
	} else if _, ok := d.Rates[faults.LockRenewalStall]; ok {
		t.Fatal("DefaultSpec names lock-renewal-stall")
	}
	// "default" among other entries is DefaultSpec's rates plus those.
	if s, err := faults.ParseSpec("default,lock-renewal-stall=0.01:20s..1m"); err != nil {
		t.Fatal(err)
	} else if want := faults.DefaultSpec().String() + ",lock-renewal-stall=0.01:20s..1m0s"; s.String() != want {
		t.Fatalf("default plus a kind: %q, want %q", s, want)
	}
	if s, err := faults.ParseSpec("latency=0.5,default"); err != nil || s.Rates[faults.Latency].P != 0.5 || len(s.Rates) != len(faults.DefaultSpec().Rates) {
		t.Fatalf("a kind named beside default keeps its rate: %v, %v", err, s)
	}
	if n, err := faults.ParseSpec("none"); err != nil || n.String() != "none" {
		t.Fatalf("none: %v %q", err, n)
	}
	for _, bad := range []string{"bogus=0.1", "cpi-error=1.5", "cpi-error", "cpi-error=0.1:1s..2s",
		"latency=0.1:2s..1s", "latency=0.1:1s", "latency=0.1,latency=0.2", "latency=x",
		"cpi-error=NaN", "cpi-error=nan", "cpi-error=Inf", "cpi-error=+Inf", "cpi-error=-Inf", "cpi-error=-0.1", "cpi-error=1e400", "default,default", "default,latency=0.1,latency=0.2"} {
		if _, err := faults.ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted it", bad)
		}
	}
}

func TestParseFaultRejects(t *testing.T) {
	for _, bad := range []string{"", "cpi-error", "nope@1", "latency@-1 d=1s", "latency@1", "cpi-error@1",
		"lost-response@1 d=1s", "latency@1 d=1s d=2s", "cpi-error@1 type=\"x", "latency@1 d=forever", "mbus-lost@1 junk"} {
		if f, err := faults.ParseFault(bad); err == nil {
			t.Errorf("ParseFault(%q) = %v, want an error", bad, f)
		}
	}
	if _, err := faults.ParseSchedule("# comment\n\nlatency@1 d=1s;;mbus-lost@3\n"); err != nil {
		t.Fatal(err)
	}
}

// drive feeds an injector a fixed operation sequence, as a simulation would.
func drive(in *faults.Injector) [][]faults.Fault {
	var out [][]faults.Fault
	methods := []string{"create_vm", "create_disk", "attach_disk", "detach_disk", "delete_disk"}
	for i := range 2000 {
		out = append(out, in.Next(faults.SeamCPI, methods[i%len(methods)]))
		out = append(out, in.Next(faults.SeamAgent, "add_dynamic_disk"))
		out = append(out, in.Next(faults.SeamMbus, "agent.a1"))
		out = append(out, in.Next(faults.SeamStep, ""))
		if i%10 == 0 {
			out = append(out, in.Next(faults.SeamVM, "vm-x"))
		}
	}
	return out
}

func TestRandomInjectorIsSeededAndReplaysScripted(t *testing.T) {
	spec := faults.DefaultSpec()
	spec.Rates[faults.CPIOutage] = faults.Rate{P: 0.01, Min: 5 * time.Second, Max: time.Minute}
	spec.Rates[faults.LockRenewalStall] = faults.Rate{P: 0.01, Min: 10 * time.Second, Max: time.Minute}
	a, b := faults.NewRandom(spec, 42), faults.NewRandom(spec, 42)
	ra, rb := drive(a), drive(b)
	if !slices.EqualFunc(ra, rb, slices.Equal) {
		t.Fatal("same spec and seed drew different faults")
	}
	fired := a.Fired()
	seen := map[faults.Kind]bool{}
	for _, f := range fired {
		seen[f.Kind] = true
		if f.Kind == faults.CPIError && f.OkToRetry && f.On == "create_vm" && f.ErrType != faults.ErrVMCreationFailed {
			t.Errorf("retryable create_vm error of type %s", f.ErrType)
		}
	}
	if len(seen) != len(faults.Kinds) {
		t.Fatalf("the default spec, cpi-outage and lock-renewal-stall fired only %d kinds over 2000 operations", len(seen))
	}
	if other := drive(faults.NewRandom(spec, 43)); slices.EqualFunc(ra, other, slices.Equal) {
		t.Fatal("seeds 42 and 43 drew the same faults")
	}

	// The printed schedule, parsed back and scripted, fires the same faults
	// at the same operations.
	sched, err := faults.ParseSchedule(fired.String())
	if err != nil {
		t.Fatal(err)
	}
	if rs := drive(faults.NewScripted(sched)); !slices.EqualFunc(ra, rs, slices.Equal) {
		t.Fatal("replaying the fired schedule gave different faults")
	}
}

func TestKindsDrawFromTheirOwnStreams(t *testing.T) {
	base, _ := faults.ParseSpec("cpi-error=0.1,latency=0.1")
	more, _ := faults.ParseSpec("cpi-error=0.1,latency=0.5,mbus-lost=0.3")
	pick := func(s faults.Schedule) faults.Schedule {
		var out faults.Schedule
		for _, f := range s {
			if f.Kind == faults.CPIError {
				out = append(out, f)
			}
		}
		return out
	}
	x, y := faults.NewRandom(base, 7), faults.NewRandom(more, 7)
	drive(x)
	drive(y)
	if px, py := pick(x.Fired()), pick(y.Fired()); len(px) == 0 || !slices.Equal(px, py) {
		t.Fatalf("changing other kinds' rates moved the cpi-error faults (%d vs %d)", len(px), len(py))
	}
}

func TestScriptedOnFilterAndHeal(t *testing.T) {
	sched, err := faults.ParseSchedule("cpi-error@1 on=attach_disk type=Bosh::Clouds::CloudError\nlatency@2 d=1s")
	if err != nil {
		t.Fatal(err)
	}
	in := faults.NewScripted(sched)
	if f := in.Next(faults.SeamCPI, "attach_disk"); f != nil {
		t.Fatalf("op 0: %v", f)
	}
	if f := in.Next(faults.SeamCPI, "detach_disk"); f != nil {
		t.Fatalf("op 1 is detach_disk, but the attach_disk fault fired: %v", f)
	}
	if f := in.Next(faults.SeamCPI, "anything"); len(f) != 1 || f[0].Kind != faults.Latency || f[0].Duration != time.Second {
		t.Fatalf("op 2: %v", f)
	}
	in2 := faults.NewScripted(sched)
	in2.Heal()
	for range 5 {
		if f := in2.Next(faults.SeamCPI, "attach_disk"); f != nil {
			t.Fatalf("a healed injector fired %v", f)
		}
	}
	if in2.Count(faults.SeamCPI) != 5 {
		t.Fatal("a healed injector stopped counting")
	}
}

// A fault with n= fires at the nth operation of its name, wherever that
// falls, so a schedule survives operations being removed before it; the
// injector records each fired fault's rank, and the text form keeps it.
func TestScriptedByNameRank(t *testing.T) {
	f, err := faults.ParseFault("cpi-error@7 on=detach_disk n=2 type=Bosh::Clouds::CloudError")
	if err != nil {
		t.Fatal(err)
	}
	if f.Nth != 2 || f.String() != "cpi-error@7 on=detach_disk n=2 type=Bosh::Clouds::CloudError" {
		t.Fatalf("parsed %+v, printed %q", f, f)
	}
	if _, err := faults.ParseFault("cpi-error@7 n=2 type=Bosh::Clouds::CloudError"); err == nil {
		t.Fatal("n= without on= was accepted")
	}
	in := faults.NewScripted(faults.Schedule{f})
	var firedAt []int
	for i, m := range []string{"attach_disk", "detach_disk", "create_disk", "detach_disk", "detach_disk"} {
		if got := in.Next(faults.SeamCPI, m); len(got) > 0 {
			firedAt = append(firedAt, i)
			if got[0].At != i || got[0].Nth != 2 {
				t.Fatalf("fired %+v at operation %d", got[0], i)
			}
		}
	}
	if len(firedAt) != 1 || firedAt[0] != 3 {
		t.Fatalf("fired at %v, want [3] (the second detach_disk)", firedAt)
	}
	rnd := faults.NewRandom(faults.Spec{Rates: map[faults.Kind]faults.Rate{faults.CPIError: {P: 1}}}, 1)
	rnd.Next(faults.SeamCPI, "a")
	rnd.Next(faults.SeamCPI, "b")
	if got := rnd.Next(faults.SeamCPI, "a"); len(got) != 1 || got[0].Nth != 2 || got[0].At != 2 {
		t.Fatalf("random injector recorded %+v, want at 2, n=2", got)
	}
}

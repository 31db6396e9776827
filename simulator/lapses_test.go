package simulator

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/simulator/faults"
)

// A lock renewal stall reaches lease expiry, and a Director that lets a
// job go on after it lost its lock is caught. Task A's attach_disk takes
// 40 s against a lease of 20 s while the renewal is stalled for 2 min; B,
// waiting for the instance's VM lock, takes it when A's lease lapses. The
// reference Director fails A at its next checkpoint with the loss, which
// the stall explains, and B succeeds: the run is clean, and the world saw
// the takeover. The planted Director's event log shows A starting one
// more step once it lost the lock (what a Director that renews a lost
// lease silently shows): lost-lock-stops-job reports it at quiescence.
func TestLostLockStopsTheJob(t *testing.T) {
	sched, err := faults.ParseSchedule("latency@0 on=attach_disk n=1 d=40s; lock-renewal-stall@0 on=attach_disk n=1 d=2m")
	if err != nil {
		t.Fatal(err)
	}
	ops := controlOps(t, "c0 provide disk=a vm=0", "c1 provide disk=b vm=0 delay=5s")
	var world *World
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1, Workload: WorkloadConfig{Shape: ShapeSlowCPI}}, Ops: ops, Scripted: true,
		Schedule: sched, tamper: tamper{afterOp: func(w *World, o Op) { world = w }}}
	o := Simulate(cfg)
	if o.Err != nil {
		t.Fatalf("reference director: %v", o.Err)
	}
	if world == nil {
		t.Fatal("no operation ended")
	}
	world.mu.Lock()
	var stalled int
	for _, tk := range world.takeovers {
		if tk.stalled && tk.started >= 0 {
			stalled++
		}
	}
	world.mu.Unlock()
	if stalled == 0 {
		t.Fatalf("no lock was taken from a task whose lease lapsed under the stall: the control proves nothing (log %q)", o.Log)
	}
	if !strings.Contains(strings.Join(o.Log, "\n"), "c0 provide disk=a vm=0: failed") {
		t.Fatalf("the task that lost its lock did not fail: %q", o.Log)
	}

	// Planted: A's event log gains a started step once it ended.
	lost := regexp.MustCompile(`^/tasks/(\d+)/output$`)
	cfg.tamper.api = func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if !lost.MatchString(r.URL.Path) || r.URL.Query().Get("type") != "event" {
				h.ServeHTTP(rw, r)
				return
			}
			task, tr := httptest.NewRecorder(), r.Clone(r.Context())
			tr.URL.Path, tr.URL.RawQuery = strings.TrimSuffix(r.URL.Path, "/output"), ""
			h.ServeHTTP(task, tr)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			if bytes.Contains(task.Body.Bytes(), []byte("lock lost")) {
				body = append(body, []byte(`{"state":"started","stage":"planted","task":"after the loss"}`+"\n")...)
			}
			rw.WriteHeader(rec.Code)
			_, _ = rw.Write(body)
		})
	}
	o = Simulate(cfg)
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvLostLockHonoured || !strings.Contains(v.Err.Error(), "after task") {
		t.Fatalf("a job that goes on after losing its lock: got %v, want %s", o.Err, InvLostLockHonoured)
	}
}

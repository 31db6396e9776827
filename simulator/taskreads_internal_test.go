package simulator

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/simulator/faults"
)

// The simulated clients read their tasks in process (director.API.Task)
// instead of through GET /tasks/:id: after every operation of runs of the
// default sweep, every task the Director has, read both ways, is the same
// TaskView, and a task past the newest is an error in process as it is a
// 404 through HTTP.
func TestInProcessTaskReadsAreHTTPReads(t *testing.T) {
	spec, err := faults.ParseSpec(ReferenceSweepFaults)
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	states := map[director.TaskState]bool{}
	for seed := Seed(1); seed <= 3; seed++ {
		// afterOp runs on a simulated goroutine: it keeps the first
		// difference for the test's goroutine to report.
		var diff error
		cfg := SimConfig{RunConfig: RunConfig{Seed: seed, Steps: 80, Faults: spec}}
		cfg.tamper.afterOp = func(w *World, _ Op) {
			w.mu.Lock()
			api := w.apiTasks
			w.mu.Unlock()
			if api == nil || diff != nil {
				return // the Director is down, or a difference is known
			}
			for id := int64(1); ; id++ {
				in, inErr := api.Task(apiPrincipal, id)
				viaHTTP, httpErr := w.httpTask(id)
				if inErr != nil {
					var ae *apiError
					if !errors.As(httpErr, &ae) || ae.Status != http.StatusNotFound {
						diff = fmt.Errorf("task %d read in process failed (%v); through HTTP: %v", id, inErr, httpErr)
					}
					return
				}
				if httpErr != nil {
					diff = fmt.Errorf("task %d read in process, but through HTTP: %w", id, httpErr)
					return
				}
				if !reflect.DeepEqual(in, viaHTTP) {
					diff = fmt.Errorf("task %d\n  in process %#v\nthrough HTTP %#v", id, in, viaHTTP)
					return
				}
				compared++
				states[in.State] = true
			}
		}
		o := Simulate(cfg)
		if diff != nil {
			t.Fatalf("seed %d: %v", seed, diff)
		}
		if o.Err != nil {
			t.Fatalf("seed %d: %v", seed, o.Err)
		}
	}
	for _, s := range []director.TaskState{director.TaskProcessing, director.TaskDone, director.TaskError} {
		if !states[s] {
			t.Errorf("no task was compared in state %s (compared %d reads in states %v)", s, compared, states)
		}
	}
	t.Logf("%d task reads compared, states %v", compared, states)
}

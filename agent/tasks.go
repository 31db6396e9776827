package agent

import (
	"encoding/json"
	"fmt"

	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// task is one long-running action. Tasks live in memory only, as upstream's:
// a restarted agent no longer knows them.
type task struct {
	id    string
	done  bool  // guarded by Agent.mu
	value any   // guarded by Agent.mu
	err   error // guarded by Agent.mu
}

// startTask runs fn as a logical goroutine and returns the task ID; after
// Stop it starts nothing and reports false.
func (a *Agent) startTask(method string, fn func() (any, error)) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopOnce {
		return "", false
	}
	id := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a.r.Rand("agent.tasks").Uint32(), a.r.Rand("agent.tasks").Uint32()&0xffff,
		0x4000|a.r.Rand("agent.tasks").Uint32()&0x0fff, 0x8000|a.r.Rand("agent.tasks").Uint32()&0x3fff, a.r.Rand("agent.tasks").Uint64()&0xffffffffffff)
	for a.tasks[id] != nil {
		id += "-1"
	}
	t := &task{id: id}
	a.tasks[id] = t
	var prev, end *rt.Event
	if a.cfg.Knobs.SerialTasks {
		prev, end = a.lastTask, rt.NewEvent(a.r)
		a.lastTask = end
	}
	a.running.Go("agent "+a.agentID+" task "+method, func() {
		if end != nil {
			defer end.Set()
		}
		if prev != nil {
			prev.Wait(0)
		}
		v, err := fn()
		a.mu.Lock()
		t.done, t.value, t.err = true, v, err
		a.mu.Unlock()
	})
	return id, true
}

// getTask answers get_task: the task's state while it runs, then its result
// or its error.
func (a *Agent) getTask(args []json.RawMessage) (any, error) {
	id, err := stringArg("get_task", args, 0, "agent_task_id")
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[id]
	switch {
	case t == nil:
		return nil, fmt.Errorf("Task with id %s could not be found", id)
	case !t.done:
		return mbus.TaskState{AgentTaskID: id, State: mbus.TaskRunning}, nil
	case t.err != nil:
		// Upstream's get_task: "Task <id> result: <the action's error>".
		return nil, fmt.Errorf("Task %s result: %w", id, t.err)
	}
	return t.value, nil
}

package agent_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/mbus"
)

// docs/upstream.md (agent, task queue): bosh-agent runs long-running
// actions one at a time, in order (agent/task/async_task_service.go), as
// the differential test against it shows; Knobs.SerialTasks restores that.
// By default a task runs at once. A look-up of a device that never appears
// (mapped fallback, 1 s here) holds a second add_dynamic_disk back only
// under the knob.
func TestSerialTasksQueueLikeUpstream(t *testing.T) {
	for _, serial := range []bool{false, true} {
		e := newEnv(t)
		v := newVMRoot(t, "vm-1")
		v.attach(t, diskA, 'c', "sd", 1)
		cfg := e.config(v, "agent-1")
		cfg.DeviceResolver = agent.ResolverMapped
		cfg.DeviceTimeout = time.Second
		cfg.Knobs.SerialTasks = serial
		a := startAgent(t, cfg)
		raw := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
		task := func(r mbus.Reply) string {
			t.Helper()
			b, _ := json.Marshal(r)
			var st struct {
				Value mbus.TaskState `json:"value"`
			}
			if err := json.Unmarshal(b, &st); err != nil || st.Value.AgentTaskID == "" {
				t.Fatalf("serial=%v: want a running task, got %s", serial, b)
			}
			return st.Value.AgentTaskID
		}
		stuck := task(a.Dispatch("add_dynamic_disk", []json.RawMessage{raw("disk-stuck-0000000000000000"), raw(map[string]string{"path": "/dev/sdz"})}))
		quick := task(a.Dispatch("add_dynamic_disk", []json.RawMessage{raw(diskA), raw(map[string]string{"path": "/dev/sdc"})}))
		running := func(id string) bool {
			b, _ := json.Marshal(a.Dispatch("get_task", []json.RawMessage{raw(id)}))
			var st struct {
				Value mbus.TaskState `json:"value"`
			}
			_ = json.Unmarshal(b, &st)
			return st.Value.State == mbus.TaskRunning
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for running(quick) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if !running(stuck) {
			t.Fatalf("serial=%v: the stuck look-up ended within 300 ms; the test needs it running", serial)
		}
		if got := running(quick); got != serial {
			t.Errorf("serial=%v: the second add_dynamic_disk still running while the first polls: %v, want %v", serial, got, serial)
		}
		deadline = time.Now().Add(5 * time.Second)
		for (running(quick) || running(stuck)) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if running(quick) {
			t.Errorf("serial=%v: the second add_dynamic_disk did not end after the first", serial)
		}
	}
}

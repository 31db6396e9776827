package realagent

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// startBox starts a box for a test, or skips saying why it cannot run.
func startBox(t *testing.T, o Options) *Box {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not starting the real-agent box (a Docker daemon and the upstream agent)")
	}
	o.Log = t.Logf
	b, err := Start(o)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func TestBoxAnswersPingAndGetState(t *testing.T) {
	b := startBox(t, Options{})
	v, err := b.Client().Send(b.AgentID(), "ping")
	if err != nil {
		t.Fatal(err)
	}
	if string(v) != `"pong"` {
		t.Fatalf("ping answered %s, want \"pong\"", v)
	}
	v, err = b.Client().Send(b.AgentID(), "get_state")
	if err != nil {
		t.Fatalf("get_state: %v\n%s", err, b.Logs(40))
	}
	var st struct {
		AgentID  string `json:"agent_id"`
		JobState string `json:"job_state"`
	}
	if err := json.Unmarshal(v, &st); err != nil {
		t.Fatalf("get_state answered %s: %v", v, err)
	}
	if st.AgentID != b.AgentID() || st.JobState == "" {
		t.Fatalf("get_state answered %s, want agent_id %s and a job_state", v, b.AgentID())
	}
	out, err := b.Sh("readlink /etc/resolv.conf; id vcap")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "vcap") {
		t.Fatalf("the box has no user vcap: %s", out)
	}
	t.Logf("start figures: %v; get_state: %s", b.Figures, v)
}

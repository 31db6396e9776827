package realagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/mbus"
)

// outcome is one message's answer, as the Director sees it: the immediate
// answer's kind (value, exception or task), and for a task what get_task
// finally said.
type outcome struct {
	Kind  string          // "value", "exception", "task"
	Final string          // for a task: "value", "exception" or "running" (gave up)
	Value json.RawMessage // the (final) value
	Err   string          // the (final) exception's message
	Took  time.Duration
}

func (o outcome) String() string {
	s := o.Kind
	if o.Kind == "task" {
		s += "→" + o.Final
	}
	if o.Err != "" {
		return s + ": " + o.Err
	}
	return s + ": " + string(o.Value)
}

// result is the answer's shape: the kind(s), and an exception's class.
func (o outcome) result() string {
	k := o.Kind
	if k == "task" {
		k = o.Final
	}
	if k == "exception" {
		return "exception(" + errClass(o.Err) + ")"
	}
	if k == "value" {
		return "value(" + shape(o.Value) + ")"
	}
	return k
}

// errClass sorts an agent's error text into the classes the Director and
// cpilab tell apart.
func errClass(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "path is missing"):
		return "path-missing"
	case strings.Contains(m, "timed out getting real device path"):
		return "device-timeout"
	case strings.Contains(m, "not enough arguments") || strings.Contains(m, "missing argument") || strings.Contains(m, "too few"):
		return "arguments"
	case strings.Contains(m, "could not be found") || strings.Contains(m, "task with id"):
		return "task-not-found"
	case strings.Contains(m, "unknown message"):
		return "unknown-message"
	case strings.Contains(m, "refusing unsafe name"):
		return "unsafe-name"
	}
	return "other: " + msg
}

// shape is a JSON value's shape: its type, and an object's sorted keys.
func shape(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "invalid"
	}
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			return "{}"
		}
		return "object"
	case string:
		return fmt.Sprintf("%q", x)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// guest is one agent's VM as the test sees it: its mbus ID and its files
// (its shell lines run in the guest's root directory: paths are written
// relative, "dev/vdq").
type guest struct {
	name string
	id   string
	sh   func(script string) (string, error) // a shell line on the guest's files
}

// link is where the dynamic disk link of cid leads, as a guest path ("" when
// there is no link), a relative target read from the link's directory.
func (g guest) link(t *testing.T, cid string) string {
	t.Helper()
	out, err := g.sh("readlink " + shq(strings.TrimPrefix(agent.DynamicDiskLink(cid), "/")) + " || true")
	if err != nil {
		t.Fatalf("%s: readlink: %v", g.name, err)
	}
	target := strings.TrimSpace(out)
	if target == "" {
		return ""
	}
	if !path.IsAbs(target) {
		target = path.Join(path.Dir(agent.DynamicDiskLink(cid)), target)
	}
	return target
}

func (g guest) exists(t *testing.T, p string) bool {
	t.Helper()
	p = strings.TrimPrefix(p, "/")
	out, err := g.sh("if [ -e " + shq(p) + " ] || [ -L " + shq(p) + " ]; then echo yes; else echo no; fi")
	if err != nil {
		t.Fatalf("%s: test -e %s: %v", g.name, p, err)
	}
	return strings.TrimSpace(out) == "yes"
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// send sends method(args…) and, when it answers with a task, polls get_task
// until the task ends or within runs out.
func send(c *mbus.Client, agentID string, within time.Duration, method string, args ...any) outcome {
	t0 := time.Now()
	v, err := c.Send(agentID, method, args...)
	o := outcome{Kind: "value", Value: v}
	var ae *mbus.AgentError
	switch {
	case errors.As(err, &ae):
		return outcome{Kind: "exception", Err: ae.Message, Took: time.Since(t0)}
	case err != nil:
		return outcome{Kind: "error", Err: err.Error(), Took: time.Since(t0)}
	}
	task, ok := mbus.RunningTask(v)
	if !ok {
		o.Took = time.Since(t0)
		return o
	}
	o = outcome{Kind: "task", Final: "running"}
	for time.Since(t0) < within {
		time.Sleep(100 * time.Millisecond)
		v, err := c.Send(agentID, "get_task", task.AgentTaskID)
		if errors.As(err, &ae) {
			o.Final, o.Err = "exception", ae.Message
			break
		}
		if err != nil {
			o.Final, o.Err = "error", err.Error()
			break
		}
		if _, running := mbus.RunningTask(v); !running {
			o.Final, o.Value = "value", v
			break
		}
	}
	o.Took = time.Since(t0)
	return o
}

// pair is the two agents under one test: the upstream one in the box and
// cpilab's reference agent on a VM root directory, both answering one
// Director over the box's NATS server.
type pair struct {
	t      *testing.T
	box    *Box
	root   string
	ref    *agent.Agent
	refCfg agent.Config
	real   guest
	refG   guest
}

const refAgentID = "agent-ref"

func newPair(t *testing.T) *pair {
	b := startBox(t, Options{})
	p := &pair{t: t, box: b, root: t.TempDir()}
	p.real = guest{name: "upstream", id: b.AgentID(), sh: func(script string) (string, error) { return b.Sh("cd / && " + script) }}
	p.refG = guest{name: "reference", id: refAgentID, sh: func(script string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = p.root
		cmd.Env = append(os.Environ(), "ROOT="+p.root)
		out, err := cmd.Output()
		return string(out), err
	}}
	s, err := b.Settings()
	if err != nil {
		t.Fatal(err)
	}
	s["agent_id"] = refAgentID
	s["mbus"] = b.MbusURL()
	raw, _ := json.Marshal(s)
	sp := filepath.Join(p.root, filepath.FromSlash(SettingsPath))
	for _, d := range []string{filepath.Dir(sp), filepath.Join(p.root, "dev"), filepath.Join(p.root, "tmp"), filepath.Join(p.root, "var", "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(sp, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	// The reference agent as upstream runs it where cpilab's default
	// differs in what the Director sees: one task at a time. (Relative link
	// targets are compared as the guest path they lead to; hostile names
	// stay refused: both documented in docs/upstream.md.)
	p.refCfg = agent.Config{Root: p.root, VMCID: "vm-ref", SettingsFile: SettingsPath, BindMountPersistentDisk: true,
		Knobs: agent.Knobs{SerialTasks: true}}
	p.startRef("")
	t.Cleanup(func() { p.ref.Stop() })
	return p
}

// startRef (re)starts the reference agent with the resolver given.
func (p *pair) startRef(resolver string) {
	p.t.Helper()
	if p.ref != nil {
		p.ref.Stop()
	}
	tr, err := mbus.Connect(mbus.NATSConfig{URL: p.box.MbusURL(), Name: refAgentID, TLS: p.box.MbusTLS().ClientTLS()})
	if err != nil {
		p.t.Fatal(err)
	}
	cfg := p.refCfg
	cfg.DeviceResolver = resolver
	cfg.Transport = tr
	a, err := agent.Start(cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	p.ref = a
	if err := p.box.Client().WaitUntilReady(refAgentID, 10*time.Second); err != nil {
		p.t.Fatal(err)
	}
}

// onGuests runs a shell line on both guests' files (the reference agent's
// root is the working directory: write paths relative, "dev/vdq").
func (p *pair) onGuests(script string) {
	p.t.Helper()
	if _, err := p.real.sh(script); err != nil {
		p.t.Fatalf("upstream guest: %s: %v", script, err)
	}
	if _, err := p.refG.sh(script); err != nil {
		p.t.Fatalf("reference guest: %s: %v", script, err)
	}
}

// both sends the same message to both agents, concurrently.
func (p *pair) both(within time.Duration, method string, args ...any) (real, ref outcome) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); real = send(p.box.Client(), p.real.id, within, method, args...) }()
	go func() { defer wg.Done(); ref = send(p.box.Client(), refAgentID, within, method, args...) }()
	wg.Wait()
	return real, ref
}

// same sends a message to both and fails unless the answers have the same
// kind and shape (or, listed in differs, the documented difference).
func (p *pair) same(name string, within time.Duration, method string, args ...any) (real, ref outcome) {
	p.t.Helper()
	real, ref = p.both(within, method, args...)
	p.t.Logf("%s: %s %v\n\tupstream:  %s (%.1f s)\n\treference: %s (%.1f s)", name, method, jsonArgs(args), real, real.Took.Seconds(), ref, ref.Took.Seconds())
	if real.Kind != ref.Kind || real.result() != ref.result() {
		p.t.Errorf("%s: %s answered differently:\n\tupstream:  %s → %s\n\treference: %s → %s", name, method, real.Kind, real.result(), ref.Kind, ref.result())
	}
	return real, ref
}

// sameLink fails unless both agents' links for cid lead to the same guest
// path (or both are absent), and returns it.
func (p *pair) sameLink(name, cid string) string {
	p.t.Helper()
	real, ref := p.real.link(p.t, cid), p.refG.link(p.t, cid)
	if real != ref {
		p.t.Errorf("%s: the link of %s leads to %q on the upstream agent, %q on the reference agent", name, cid, real, ref)
	}
	return real
}

func jsonArgs(args []any) string {
	b, _ := json.Marshal(args)
	return string(b)
}

const (
	diskA = "disk-aaaaaaaaaaaaaaaaaaaaaaaa"
	diskB = "disk-bbbbbbbbbbbbbbbbbbbbbbbb"
	diskC = "disk-cccccccccccccccccccccccc"
	diskV = "disk-vvvvvvvvvvvvvvvvvvvvvvvv"
	diskM = "disk-mmmmmmmmmmmmmmmmmmmmmmmm"
)

// The same message sequences go to the upstream agent (in the box) and to
// the reference agent: answers (kind, shape, error class), task outcomes and
// the links and files they leave must agree, but for the differences
// docs/upstream.md documents, each checked here as documented.
func TestDifferentialUpstreamAgent(t *testing.T) {
	p := newPair(t)
	quick := 20 * time.Second

	// settings → ping, get_state.
	// The box as a stemcell: users vcap and syslog, the agent's own
	// /etc/resolv.conf (a link, Docker's bind unmounted).
	out, err := p.box.Sh("id vcap && id syslog && test -L /etc/resolv.conf && echo ok")
	if err != nil || !strings.Contains(out, "ok") {
		t.Errorf("the box is not as a stemcell: %v: %s", err, out)
	}
	t.Logf("box start: %v", p.box.Figures)
	p.same("ping", quick, "ping")
	real, ref := p.same("get_state", quick, "get_state")
	for _, o := range []outcome{real, ref} {
		var st struct {
			AgentID  string `json:"agent_id"`
			JobState string `json:"job_state"`
			VM       struct{ Name string }
		}
		if err := json.Unmarshal(o.Value, &st); err != nil || st.AgentID == "" || st.JobState != "running" || st.VM.Name == "" {
			t.Errorf("get_state answered %s: want agent_id, job_state running and vm.name", o.Value)
		}
	}
	real, ref = p.same("get_task of an unknown task", quick, "get_task", "no-such-task")
	if real.Err != ref.Err {
		t.Errorf("get_task of an unknown task: upstream says %q, the reference agent %q", real.Err, ref.Err)
	}

	// identity resolver: the hint's path, whether or not it exists.
	p.onGuests("touch dev/sdq")
	p.same("add identity path", quick, "add_dynamic_disk", diskA, map[string]string{"path": "/dev/sdq"})
	if got := p.sameLink("add identity path", diskA); got != "/dev/sdq" {
		t.Errorf("add identity path: the link leads to %q, want /dev/sdq", got)
	}
	p.same("add same disk again, other path", quick, "add_dynamic_disk", diskA, map[string]string{"path": "/dev/sdr"})
	if got := p.sameLink("add same disk again", diskA); got != "/dev/sdr" {
		t.Errorf("add same disk again: the link leads to %q, want /dev/sdr (replaced)", got)
	}
	p.same("add plain string hint", quick, "add_dynamic_disk", diskB, "/dev/sds")
	if got := p.sameLink("add plain string hint", diskB); got != "/dev/sds" {
		t.Errorf("add plain string hint: the link leads to %q, want /dev/sds", got)
	}
	p.same("add hint without path", quick, "add_dynamic_disk", diskC, map[string]string{"id": "x"})
	p.sameLink("add hint without path", diskC)
	p.same("add with too few arguments", quick, "add_dynamic_disk", diskC)
	p.same("remove never added", quick, "remove_dynamic_disk", diskC)
	p.same("remove added", quick, "remove_dynamic_disk", diskB)
	if got := p.sameLink("remove added", diskB); got != "" {
		t.Errorf("remove added: a link is left, leading to %q", got)
	}

	// A hostile disk ID: upstream joins it into the dynamic_disks path (a
	// path traversal, docs/upstream.md); the reference agent refuses it.
	const evil = "../../../tmp/evil"
	real, ref = p.both(quick, "add_dynamic_disk", evil, map[string]string{"path": "/dev/sdq"})
	t.Logf("hostile add: upstream %s; reference %s", real, ref)
	if real.result() != "value({})" || !p.real.exists(t, "/var/tmp/evil") {
		t.Errorf("hostile add: upstream answered %s and /var/tmp/evil exists=%v; docs/upstream.md says it creates /var/tmp/evil", real, p.real.exists(t, "/var/tmp/evil"))
	}
	if ref.result() != "exception(unsafe-name)" || p.refG.exists(t, "var/tmp/evil") {
		t.Errorf("hostile add: the reference agent answered %s; want a refusal (unsafe name) and no var/tmp/evil", ref)
	}
	real, ref = p.both(quick, "remove_dynamic_disk", evil)
	t.Logf("hostile remove: upstream %s; reference %s", real, ref)
	p.onGuests("touch var/tmp/evil")
	real, ref = p.both(quick, "remove_dynamic_disk", evil)
	if real.result() != "value({})" || p.real.exists(t, "/var/tmp/evil") {
		t.Errorf("hostile remove: upstream answered %s and /var/tmp/evil exists=%v; docs/upstream.md says it deletes that file", real, p.real.exists(t, "/var/tmp/evil"))
	}
	if ref.result() != "exception(unsafe-name)" || !p.refG.exists(t, "var/tmp/evil") {
		t.Errorf("hostile remove: the reference agent answered %s and var/tmp/evil exists=%v; want a refusal, the file kept", ref, p.refG.exists(t, "var/tmp/evil"))
	}

	// A persistent disk as the Warden and Docker CPIs give it: a directory
	// (/warden-cpi-dev/<volume>) the agent binds at /var/vcap/store
	// (BindMountPersistentDisk; upstream mounts --bind, the reference agent
	// links, docs/upstream.md). The disk's files show in the store while it
	// is mounted, and only then.
	const diskP, vol = "disk-pppppppppppppppppppppppp", "/warden-cpi-dev/vol-p"
	p.onGuests("mkdir -p warden-cpi-dev/vol-p && echo on-the-disk > warden-cpi-dev/vol-p/marker")
	p.same("add_persistent_disk", quick, "add_persistent_disk", diskP, vol)
	p.same("mount_disk", quick, "mount_disk", diskP)
	for _, g := range []guest{p.real, p.refG} {
		if out, err := g.sh("cat var/vcap/store/marker"); err != nil || strings.TrimSpace(out) != "on-the-disk" {
			t.Errorf("mount_disk: on the %s agent's guest the store does not show the disk's file: %q, %v", g.name, out, err)
		}
	}
	// list_disk is a task on both. What it lists, and what unmount_disk
	// finds, depend on a mount check the box cannot satisfy: upstream looks
	// for the disk's path in the mount table, where a bind of a directory
	// shows as its file system's device, so it lists nothing and answers
	// "… is not mounted" (docs/agent.md); only the answers' kinds compare.
	real, ref = p.both(quick, "list_disk")
	t.Logf("list_disk: upstream %s; reference %s", real, ref)
	if real.Kind != "task" || ref.Kind != "task" || real.Final != "value" || ref.Final != "value" {
		t.Errorf("list_disk: upstream %s, reference %s; want a task with a value on both", real, ref)
	}
	real, ref = p.both(quick, "unmount_disk", diskP)
	t.Logf("unmount_disk: upstream %s; reference %s", real, ref)
	if real.result() != "value(object)" || ref.result() != "value(object)" {
		t.Errorf("unmount_disk: upstream %s, reference %s; want a task with a message on both", real, ref)
	}
	if p.refG.exists(t, "/var/vcap/store/marker") {
		t.Errorf("unmount_disk: the reference agent's store still shows the disk's file")
	}
	// As unmount_disk would have: the bind undone and the "last mounted
	// disk" forgotten (else the restarted agent fails to mount it again).
	if _, err := p.box.Sh("umount /var/vcap/store 2>/dev/null; rm -f /var/vcap/bosh/managed_disk_settings.json"); err != nil {
		t.Fatal(err)
	}
	p.same("remove_persistent_disk", quick, "remove_persistent_disk", diskP)

	// Links survive a restart (the VM reboots; the agent starts again).
	if err := p.box.Restart(); err != nil {
		t.Fatal(err)
	}
	p.startRef("")
	if got := p.sameLink("after restart", diskA); got != "/dev/sdr" {
		t.Errorf("after restart: the link of %s leads to %q, want /dev/sdr", diskA, got)
	}
	t.Logf("box restart took %.1f s", p.box.Figures["restart"].Seconds())

	// virtio: /dev/disk/by-id/virtio-<cid> first; without it the mapped
	// fallback polls the hint's path for 30 s, then the task fails. The
	// slow case runs alongside the others.
	if err := p.box.SetResolver("virtio"); err != nil {
		t.Fatal(err)
	}
	p.startRef("virtio")
	p.onGuests("touch dev/vdq && mkdir -p dev/disk/by-id && ln -sfn ../../vdq dev/disk/by-id/virtio-" + diskV)
	p.same("virtio by id", quick, "add_dynamic_disk", diskV, map[string]string{"path": "/dev/sdy"})
	if got := p.sameLink("virtio by id", diskV); got != "/dev/vdq" {
		t.Errorf("virtio by id: the link leads to %q, want /dev/vdq (by-id followed)", got)
	}
	p.onGuests("touch dev/vdr")
	p.same("virtio mapped fallback", quick, "add_dynamic_disk", diskB, map[string]string{"path": "/dev/sdr"})
	if got := p.sameLink("virtio mapped fallback", diskB); got != "/dev/vdr" {
		t.Errorf("virtio mapped fallback: the link leads to %q, want /dev/vdr (sdr mapped to vdr)", got)
	}
	// No device: the mapped fallback polls 30 s; an add asked meanwhile
	// waits in the task queue (Knobs.SerialTasks on the reference agent).
	var slowReal, slowRef outcome
	var slow sync.WaitGroup
	slow.Add(1)
	go func() {
		defer slow.Done()
		slowReal, slowRef = p.both(50*time.Second, "add_dynamic_disk", diskM, map[string]string{"path": "/dev/sdz"})
	}()
	time.Sleep(time.Second)
	real, ref = p.same("add queued behind a stuck look-up", 50*time.Second, "add_dynamic_disk", diskC, map[string]string{"path": "/dev/sdr"})
	if real.Took < 20*time.Second || ref.Took < 20*time.Second {
		t.Errorf("add queued behind a stuck look-up: done after %.1f s upstream, %.1f s on the reference agent; want both held back (about 30 s)", real.Took.Seconds(), ref.Took.Seconds())
	}
	slow.Wait()
	t.Logf("virtio, no device: %s\n\tupstream:  %s (%.1f s)\n\treference: %s (%.1f s)", diskM, slowReal, slowReal.Took.Seconds(), slowRef, slowRef.Took.Seconds())
	if slowReal.result() != slowRef.result() || slowRef.result() != "exception(device-timeout)" {
		t.Errorf("virtio, no device: upstream %s, reference %s; want both to time out", slowReal.result(), slowRef.result())
	}
	if d := slowReal.Took - slowRef.Took; d > 5*time.Second || d < -5*time.Second {
		t.Errorf("virtio, no device: upstream gave up after %.1f s, the reference agent after %.1f s", slowReal.Took.Seconds(), slowRef.Took.Seconds())
	}
	p.sameLink("virtio, no device", diskM)
}

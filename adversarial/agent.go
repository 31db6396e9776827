package adversarial

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/fakeiaas"
)

// unsafeName reports whether the agent must refuse a disk CID: it would
// name a path outside dynamic_disks (docs/security.md).
func unsafeName(s string) bool {
	return s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") || len(s) > 255
}

// hostileHints are disk hints that must be refused: paths and patterns
// outside the root, and values of the wrong type.
var hostileHints = []string{
	`"relative/sdc"`, `"/dev/../etc/passwd"`, `"/dev//sdc"`, `"/dev/sdc/"`, `"/dev/sdc\u0000"`,
	`{"path":"../../etc"}`, `{"path":"/` + strings.Repeat("a", 256) + `"}`, `{"path":"/` + strings.Repeat("a/", 2100) + `a"}`,
	`{"id":"../../../x"}`, `{"id":"*"}`, `{"volume_id":"1/../../x"}`, `{"volume_id":"*"}`,
	`{"lun":"?"}`, `{"lun":"2","host_device_id":"../3"}`, `{"lun":"[0-9]","host_device_id":"2"}`,
	`{"path":3}`, `{"lun":2}`, `{"volume_id":null}`, `{"id":true}`, `{"path":["/dev/sdc"]}`,
	`{"iscsi_settings":{"username":1}}`, `{"iscsi_settings":"x"}`, `42`, `null`, `[1]`, `{}`, `""`,
}

// hostileSettings are agent settings (user-data) an attacker with the
// cloud's API could give a VM.
func hostileSettings(w *vmWorld) []string {
	out := w.e.outside
	return []string{
		`{`, `[]`, `null`, `1`, `"settings"`,
		`{"agent_id":">","vm":{"name":"((vm_cid))"},"mbus":"` + w.tb.MbusURL() + `"}`,
		`{"agent_id":"*","vm":{"name":"((vm_cid))"},"mbus":"` + w.tb.MbusURL() + `"}`,
		`{"agent_id":"../../x","vm":{"name":"../../` + out + `"},"mbus":"` + w.tb.MbusURL() + `"}`,
		`{"agent_id":"adv-h","vm":{"name":"((vm_cid))"},"mbus":"file://` + out + `/file"}`,
		`{"agent_id":"adv-h","vm":{"name":"((vm_cid))"},"mbus":"nats://256.0.0.1:1"}`,
		`{"agent_id":"adv-h","vm":{"name":"((vm_cid))"},"mbus":"` + w.tb.MbusURL() + `","disks":{"system":"/dev/../../` + out + `","persistent":{"../../../../` + out + `/file":"/dev/sdc","disk-x":{"path":"../../etc"}}}}`,
		`{"agent_id":"adv-h","vm":{"name":"((vm_cid))"},"mbus":"` + w.tb.MbusURL() + `","disks":{"persistent":[1,2]},"env":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`,
		`{"agent_id":"adv-h","vm":{"name":"((vm_cid))"},"mbus":"` + w.tb.MbusURL() + `","networks":"x","blobstore":{"options":{"blobstore_path":"` + out + `"}}}`,
		`{"agent_id":"` + strings.Repeat("a", 10<<10) + `","vm":{"name":"((vm_cid))"},"mbus":"` + w.tb.MbusURL() + `"}`,
		`{"agent_id":"adv-h","agent_id":"adv-i","vm":{"name":"((vm_cid))"},"mbus":"` + w.tb.MbusURL() + `"}`,
	}
}

func runAgent(ctx context.Context, e *env, t *tally, n int) error {
	w, err := startVMWorld(ctx, e, agent.ResolverIdentity)
	if err != nil {
		return err
	}
	defer func() { _ = w.close() }()
	before, err := w.outsideRoot()
	if err != nil {
		return err
	}
	r := e.rng
	methods := []string{"add_dynamic_disk", "remove_dynamic_disk", "add_persistent_disk", "remove_persistent_disk", "mount_disk", "unmount_disk"}
	settings := hostileSettings(w)
	swapsFrom := n * 3 / 4 // link swaps last: they may leave the agent unable to start
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t.tried()
		var input string
		switch k := r.IntN(4); {
		case i >= swapsFrom:
			input = w.linkSwap(ctx, t)
		case k == 0 || k == 1:
			name, m := pick(r, hostileNames), pick(r, methods)
			input = fmt.Sprintf("%s of disk %q", m, name)
			var args []any
			args = append(args, name)
			if strings.HasPrefix(m, "add_") {
				args = append(args, map[string]string{"path": "/dev/" + w.dev})
			}
			err := w.agentAction(ctx, t, input, m, args...)
			if unsafeName(name) {
				t.expectError(input, err != nil && !errors.Is(err, context.DeadlineExceeded) && err.Error() != "", fmt.Sprintf("got %v", err))
			}
		case k == 2:
			h := pick(r, hostileHints)
			m := pick(r, []string{"add_dynamic_disk", "add_persistent_disk"})
			input = fmt.Sprintf("%s with hint %.80s", m, h)
			err := w.agentAction(ctx, t, input, m, w.diskB.String(), json.RawMessage(h))
			t.expectError(input, err != nil && !errors.Is(err, context.DeadlineExceeded) && err.Error() != "", fmt.Sprintf("got %v", err))
		default:
			s := pick(r, settings)
			input = fmt.Sprintf("a VM booted with settings %.80s", s)
			w.hostileBoot(ctx, t, input, s)
		}
		before = w.checkEscape(t, input, before)
		if i%10 == 9 {
			w.verify(ctx, t, input)
		}
	}
	w.verify(ctx, t, "end of area")
	return w.close()
}

// hostileBoot creates a VM of the world's stemcell whose agent reads the
// hostile settings, gives it a moment, and deletes it.
func (w *vmWorld) hostileBoot(ctx context.Context, t *tally, input, settings string) {
	vm, err := w.cloud.CreateVM(ctx, fakeiaas.VMSpec{AgentID: "adv-h", StemcellCID: w.stemcell, UserData: json.RawMessage(settings)})
	if err != nil {
		return // refused by the cloud: nothing booted
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_ = w.agents.Ping(pctx, "adv-h")
	cancel()
	start := time.Now()
	if err := w.cloud.DeleteVM(ctx, vm.CID); err != nil {
		t.add(OracleCrash, input, "delete_vm of the VM: %v", err)
	}
	if el := time.Since(start); el > agentBound+agentSlack {
		t.add(OracleCrash, input, "halting its agent took %v", el.Round(time.Millisecond))
	}
}

// linkSwap is a guest root's move on the agent's own files (links
// replaced by links out of the root, the dynamic_disks directory by a
// link), followed by the agent actions and the restart that would write
// through them.
func (w *vmWorld) linkSwap(ctx context.Context, t *tally) string {
	r := w.e.rng
	root, err := os.OpenRoot(w.root)
	if err != nil {
		t.add(OracleCrash, "link swap", "%v", err)
		return "link swap"
	}
	defer root.Close()
	dd := agent.DynamicDiskLink(w.diskA.String())
	targets := []string{w.e.outside, filepath.Join(w.e.outside, "file"), filepath.Join(w.e.outside, "settings.json.tmp"),
		"../../../../../../../../" + strings.TrimPrefix(w.e.outside, "/"), filepath.Join(w.e.outside, "dynamic_disks")}
	target := pick(r, targets)
	var what string
	switch r.IntN(4) {
	case 0:
		what = dd
	case 1:
		what = "var/vcap/bosh/settings.json.tmp"
	case 2:
		what = "var/vcap/data/dynamic_disks"
	default:
		what = "var/vcap/bosh/settings.json"
	}
	_ = root.RemoveAll(what)
	_ = root.Symlink(target, what)
	m := pick(r, []string{"add_dynamic_disk", "remove_dynamic_disk", "dynamic_disk_usage", "restart"})
	if !w.agentUp(ctx) {
		m = "restart" // an agent that could not start again gets a new start on the root as left
	}
	input := fmt.Sprintf("guest swaps %s for a link to %s, then %s", what, target, m)
	switch m {
	case "add_dynamic_disk":
		_ = w.agentAction(ctx, t, input, m, w.diskA.String(), map[string]string{"path": "/dev/" + w.dev})
	case "remove_dynamic_disk":
		_ = w.agentAction(ctx, t, input, m, pick(r, []string{w.diskA.String(), "victim", "file"}))
	default:
		_ = w.agentAction(ctx, t, input, m)
	}
	return input
}

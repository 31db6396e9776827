package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/realagent"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/vmroot"
)

// RealAgents (cpilab certify --agent real) puts the upstream BOSH agent in
// place of the reference agent where the dynamic disk link is decided:
// add_dynamic_disk and remove_dynamic_disk go to the reference agent of the
// VM (which keeps its settings, hints and mounts) and then to the upstream
// agent in the box, after the VM's device nodes (/dev/sd*, vd*, xvd*,
// nvme*, /dev/disk/…) have been copied into the box by name; the link the
// upstream agent makes replaces the reference agent's in the VM root, so
// every later check (the data written through the link lands on the disk)
// judges the upstream resolver's choice. Its answer is the one returned.
// The box hosts the identity and virtio resolvers; on a VM whose agent uses
// another one the action fails with cpisuite.ErrNotHosted (not checked).
// Every other action goes to the reference agent.
type RealAgents struct {
	Ref Agents
	Box *realagent.Box

	mu       sync.Mutex // one VM's devices in the box at a time
	resolver string     // the box's current resolver; guarded by mu
	hosted   int        // actions the upstream agent answered; guarded by mu
}

// Hosted is how many actions the upstream agent answered.
func (r *RealAgents) Hosted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hosted
}

var _ cpisuite.Agents = (*RealAgents)(nil)

// RealAgents wraps the testbed's agents with the upstream agent in box.
func (t *Testbed) RealAgents(box *realagent.Box) *RealAgents {
	return &RealAgents{Ref: Agents{t}, Box: box, resolver: "identity"}
}

// Ping waits for the reference agent (the box's agent answers on its own).
func (r *RealAgents) Ping(ctx context.Context, agentID string) error {
	return r.Ref.Ping(ctx, agentID)
}

// hosted are the resolvers the box hosts, and why the others are not.
func hostedResolver(res string) (string, error) {
	switch res {
	case "", agent.ResolverIdentity:
		return "identity", nil
	case agent.ResolverVirtio:
		return "virtio", nil
	case agent.ResolverSCSI:
		return "", fmt.Errorf("the upstream agent's box hosts the identity and virtio resolvers; this VM's agent uses scsi, which needs a real VM's /sys/bus/scsi tree: %w", cpisuite.ErrNotHosted)
	case agent.ResolverMapped:
		return "", fmt.Errorf("the upstream agent's box hosts the identity and virtio resolvers; this VM's agent uses mapped, a cpilab resolver type upstream has not (only as virtio's fallback): %w", cpisuite.ErrNotHosted)
	}
	return "", fmt.Errorf("the upstream agent's box hosts the identity and virtio resolvers; this VM's agent uses %q: %w", res, cpisuite.ErrNotHosted)
}

// Run runs the action; see RealAgents.
func (r *RealAgents) Run(ctx context.Context, agentID, method string, args ...any) (json.RawMessage, error) {
	if method != agent.MethodAddDynamicDisk && method != agent.MethodRemoveDynamicDisk {
		return r.Ref.Run(ctx, agentID, method, args...)
	}
	t := r.Ref.t
	vm := r.Ref.vmOf(ctx, agentID)
	if vm == "" || t.agents == nil {
		return nil, fmt.Errorf("agent %s: no VM of the embedded cloud runs it: %w", agentID, cpisuite.ErrNotHosted)
	}
	a := t.agents.Agent(vm)
	if a == nil {
		return nil, fmt.Errorf("agent %s on %s is not running: %w", agentID, vm, cpisuite.ErrNotHosted)
	}
	res, err := hostedResolver(a.DeviceResolver())
	if err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return r.Ref.Run(ctx, agentID, method, args...)
	}
	cid, _ := args[0].(string)
	if err := agent.CheckName("disk CID", cid); err != nil {
		return r.Ref.Run(ctx, agentID, method, args...)
	}
	if _, err := r.Ref.Run(ctx, agentID, method, args...); err != nil {
		return nil, fmt.Errorf("the reference agent (settings, hints) before the upstream one: %w", err)
	}
	vmCID, err := cpiv2.NewVMCID(vm)
	if err != nil {
		return nil, err
	}
	root := t.IaaS.Cloud().VMRoot(vmCID)

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resolver != res {
		if err := r.Box.SetResolver(res); err != nil {
			return nil, fmt.Errorf("switching the upstream agent to the %s resolver: %w", res, err)
		}
		r.resolver = res
	}
	if err := r.mirrorDevices(root); err != nil {
		return nil, err
	}
	type result struct {
		v   json.RawMessage
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := r.Box.Client().Run(r.Box.AgentID(), method, args...)
		ch <- result{v, err}
	}()
	var out result
	select {
	case out = <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("upstream agent: %s: %w", method, ctx.Err())
	}
	r.hosted++
	if out.err != nil {
		return nil, fmt.Errorf("upstream agent (%s resolver): %w", res, out.err)
	}
	if err := r.copyLink(root, cid); err != nil {
		return nil, err
	}
	return out.v, nil
}

// devName is a device node name the box copies.
var devName = regexp.MustCompile(`^(sd|vd|xvd|nvme|hd)[a-z0-9]*$`)

// mirrorDevices makes the box's /dev hold the VM's device names: empty
// files for device nodes, the same links under /dev/disk.
func (r *RealAgents) mirrorDevices(root string) error {
	var lines []string
	lines = append(lines, "rm -rf /dev/disk", "for f in /dev/sd* /dev/vd* /dev/xvd* /dev/nvme* /dev/hd*; do [ -f \"$f\" ] && rm -f \"$f\"; done; true")
	dev := filepath.Join(root, "dev")
	ents, err := os.ReadDir(dev)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("reading the VM's devices: %w", err)
	}
	for _, e := range ents {
		if devName.MatchString(e.Name()) && !e.IsDir() {
			lines = append(lines, "touch "+shq("/dev/"+e.Name()))
		}
	}
	var links []string
	_ = filepath.WalkDir(filepath.Join(dev, "disk"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dev, p)
		guest := "/dev/" + filepath.ToSlash(rel)
		if strings.ContainsAny(guest, "\n\x00") {
			return nil
		}
		switch {
		case d.IsDir():
			lines = append(lines, "mkdir -p "+shq(guest))
		case d.Type()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil && !strings.ContainsAny(target, "\n\x00") {
				links = append(links, "ln -sfn "+shq(target)+" "+shq(guest))
			}
		default:
			lines = append(lines, "touch "+shq(guest))
		}
		return nil
	})
	sort.Strings(links)
	lines = append(lines, links...)
	if out, err := r.Box.Sh(strings.Join(lines, "\n")); err != nil {
		return fmt.Errorf("copying the VM's device names into the upstream agent's box: %v: %s", err, out)
	}
	return nil
}

// copyLink puts the upstream agent's link for cid (or its absence) into the
// VM root, in the reference agent's relative form.
func (r *RealAgents) copyLink(root, cid string) error {
	guestLink := agent.DynamicDiskLink(cid)
	out, err := r.Box.Sh("readlink " + shq(guestLink) + " || true")
	if err != nil {
		return fmt.Errorf("reading the upstream agent's link: %w", err)
	}
	target := strings.TrimSpace(out)
	fsys, err := vmroot.Open(root)
	if err != nil {
		return fmt.Errorf("the VM root: %w", err)
	}
	defer fsys.Close()
	if target == "" {
		if err := fsys.RemoveAll(guestLink); err != nil {
			return fmt.Errorf("removing the reference agent's link as the upstream agent did: %w", err)
		}
		return nil
	}
	if !path.IsAbs(target) {
		target = path.Join(path.Dir(guestLink), target)
	}
	if err := agent.CheckGuestPath("the upstream agent's link target", target); err != nil {
		return err
	}
	rel := strings.Repeat("../", strings.Count(path.Dir(guestLink), "/")) + strings.TrimPrefix(target, "/")
	if err := fsys.Symlink(rel, guestLink, vmroot.SymlinkAtomic); err != nil {
		return fmt.Errorf("replacing the reference agent's link with the upstream agent's: %w", err)
	}
	return nil
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

package adversarial

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/vmssh"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
)

// vmWorld is a testbed (fakeiaas, NATS, agents, SFTP) with one VM under
// attack: disk A attached (its agent link made), disk B detached, both
// with canaries in their backing files.
type vmWorld struct {
	e        *env
	tb       *testbed.Testbed
	cloud    *fakeiaas.Cloud
	agents   cpisuite.Agents
	signer   ssh.Signer
	sftp     *vmssh.Client
	vm       cpiv2.VMCID
	agentID  string
	stemcell cpiv2.StemcellCID
	root     string
	diskA    cpiv2.DiskCID
	diskB    cpiv2.DiskCID
	dev      string // disk A's device node name under dev/
}

func startVMWorld(ctx context.Context, e *env, resolver string) (*vmWorld, error) {
	dir := filepath.Join(e.dir, "testbed")
	tb, err := testbed.Start(testbed.Config{Dir: dir, AgentDeviceTimeout: 200 * time.Millisecond, AgentBootTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	w := &vmWorld{e: e, tb: tb, cloud: tb.IaaS.Cloud(), agentID: "adversarial-agent"}
	if err := w.setup(ctx, resolver); err != nil {
		_ = w.close()
		return nil, err
	}
	return w, nil
}

func (w *vmWorld) setup(ctx context.Context, resolver string) error {
	sc, err := w.tb.SuiteConfig([]string{"unused"})
	if err != nil {
		return err
	}
	w.agents = sc.Agents
	key, err := os.ReadFile(w.tb.SSHKeyPath())
	if err != nil {
		return err
	}
	if w.signer, err = ssh.ParsePrivateKey(key); err != nil {
		return err
	}
	img, err := w.tb.StemcellImageFor(2, resolver)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(img)
	if err != nil {
		return err
	}
	st, err := w.cloud.CreateStemcell(ctx, fakeiaas.StemcellSpec{ImagePath: img, Image: b})
	if err != nil {
		return err
	}
	settings, _ := json.Marshal(map[string]any{"agent_id": w.agentID, "vm": map[string]string{"name": fakeiaas.VMCIDPlaceholder},
		"mbus": w.tb.MbusURL(), "disks": map[string]any{"system": "/dev/sda", "persistent": map[string]any{}}})
	w.stemcell = st.CID
	vm, err := w.cloud.CreateVM(ctx, fakeiaas.VMSpec{AgentID: w.agentID, StemcellCID: st.CID, UserData: settings})
	if err != nil {
		return err
	}
	w.vm, w.root = vm.CID, w.cloud.VMRoot(vm.CID)
	for _, p := range []*cpiv2.DiskCID{&w.diskA, &w.diskB} {
		d, err := w.cloud.CreateDisk(ctx, fakeiaas.DiskSpec{SizeMiB: 4})
		if err != nil {
			return err
		}
		*p = d.CID
		f, err := os.OpenFile(w.cloud.DiskFile(d.CID), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteAt(canary(d.CID.String()), canaryOffset)
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
	}
	att, err := w.cloud.AttachDisk(ctx, w.vm, w.diskA)
	if err != nil {
		return err
	}
	w.dev = att.Device
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := w.agents.Ping(pctx, w.agentID); err != nil {
		return err
	}
	if _, err := w.agents.Run(pctx, w.agentID, "add_dynamic_disk", w.diskA.String(), map[string]string{"path": "/dev/" + w.dev}); err != nil {
		return fmt.Errorf("add_dynamic_disk: %w", err)
	}
	return w.dial()
}

func (w *vmWorld) dial() error {
	if w.sftp != nil {
		_ = w.sftp.Close()
	}
	c, err := vmssh.Dial(vmssh.ClientConfig{Addr: w.tb.SSH.Addr(), VMCID: w.vm.String(), Signer: w.signer, HostKey: w.tb.SSH.HostKey()})
	w.sftp = c
	return err
}

func (w *vmWorld) close() error {
	if w.tb == nil {
		return nil
	}
	var errs []error
	if w.sftp != nil {
		errs = append(errs, w.sftp.Close())
		w.sftp = nil
	}
	errs = append(errs, w.tb.Close(), os.RemoveAll(w.tb.Dir()))
	w.tb = nil
	return errors.Join(errs...)
}

// outsideRoot describes everything the VM's user must not change: the
// sentinel tree and the testbed's directory but the VM root.
func (w *vmWorld) outsideRoot() (string, error) {
	a, err := hashTree(w.e.outside, "")
	if err != nil {
		return "", err
	}
	b, err := hashTree(w.tb.Dir(), w.root)
	return a + "\n" + b, err
}

// checkEscape compares outsideRoot with before and counts a change.
func (w *vmWorld) checkEscape(t *tally, input, before string) string {
	after, err := w.outsideRoot()
	if err != nil {
		t.add(OracleEscape, input, "could not read outside the root: %v", err)
		return before
	}
	if after != before {
		t.add(OracleEscape, input, "outside the VM root changed: %s", diffLines(before, after))
	}
	return after
}

// verify is the data-lost oracle (both disks keep their canaries, the VM
// and its attachment stay) and the escape oracle for hard links (nothing
// in the root names disk B's backing file, one name disk A's).
func (w *vmWorld) verify(ctx context.Context, t *tally, input string) {
	vm, err := w.cloud.VM(ctx, w.vm)
	if err != nil || len(vm.Attachments) != 1 || vm.Attachments[0].DiskCID != w.diskA {
		t.add(OracleDataLost, input, "the VM or its attachment of %s changed: %+v, %v", w.diskA, vm.Attachments, err)
	}
	for _, d := range []cpiv2.DiskCID{w.diskA, w.diskB} {
		f, err := os.Open(w.cloud.DiskFile(d))
		if err != nil {
			t.add(OracleDataLost, input, "disk %s's backing file: %v", d, err)
			continue
		}
		buf := make([]byte, len(canary(d.String())))
		_, err = f.ReadAt(buf, canaryOffset)
		_ = f.Close()
		if err != nil || !bytes.Equal(buf, canary(d.String())) {
			t.add(OracleDataLost, input, "disk %s lost its canary: %q, %v", d, buf, err)
		}
	}
	if n := namesOf(w.root, w.cloud.DiskFile(w.diskB)); n != 0 {
		t.add(OracleEscape, input, "%d names in the root reach detached disk %s", n, w.diskB)
	}
	if n := namesOf(w.root, w.cloud.DiskFile(w.diskA)); n > 1 {
		t.add(OracleEscape, input, "%d names in the root reach disk %s (one device node expected)", n, w.diskA)
	}
}

// namesOf counts the regular files under root that are the file p.
func namesOf(root, p string) int {
	want, err := os.Stat(p)
	if err != nil {
		return 0
	}
	n := 0
	_ = filepath.WalkDir(root, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := os.Lstat(q); err == nil && os.SameFile(fi, want) {
				n++
			}
		}
		return nil
	})
	return n
}

// alive checks the SFTP session still answers; a dead one is a crash,
// and is brought back for the next input. (An agent whose files the user
// removed may stop answering: the user is root in its VM, and that is no
// crash of cpilab's.)
func (w *vmWorld) alive(t *tally, input string) {
	if _, err := w.sftp.Stat("/"); err != nil {
		t.add(OracleCrash, input, "the SFTP session died: %v", err)
		if err := w.dial(); err != nil {
			t.add(OracleCrash, input, "SFTP login after the input: %v", err)
		}
	}
}

// agentUp reports whether the agent answers a ping within a short bound.
func (w *vmWorld) agentUp(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	return w.agents.Ping(pctx, w.agentID) == nil
}

// agentBound bounds one agent action; past it plus agentSlack the call
// hung.
const (
	agentBound = 3 * time.Second
	agentSlack = 5 * time.Second
)

// agentAction runs one agent action (or a restart of the VM, which
// restarts the agent on the root as the user left it) and applies the
// hang oracle.
func (w *vmWorld) agentAction(ctx context.Context, t *tally, input, method string, args ...any) error {
	start := time.Now()
	var err error
	if method == "restart" {
		err = w.cloud.RebootVM(ctx, w.vm)
	} else {
		actx, cancel := context.WithTimeout(ctx, agentBound)
		_, err = w.agents.Run(actx, w.agentID, method, args...)
		cancel()
	}
	if el := time.Since(start); el > agentBound+agentSlack {
		t.add(OracleCrash, input, "agent %s took %v, past its bound", method, el.Round(time.Millisecond))
	}
	return err
}

// sftpRefused: a clear SFTP refusal is a status the client maps to a
// permission, existence or validity error, with a message.
func sftpRefused(err error) bool {
	return err != nil && err.Error() != "" && (errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) ||
		errors.Is(err, fs.ErrInvalid) || errors.Is(err, fs.ErrExist) || strings.Contains(err.Error(), "sftp: "))
}

func runSFTP(ctx context.Context, e *env, t *tally, n int) error {
	w, err := startVMWorld(ctx, e, agent.ResolverMapped)
	if err != nil {
		return err
	}
	defer func() { _ = w.close() }()
	before, err := w.outsideRoot()
	if err != nil {
		return err
	}
	r := e.rng
	link := "/" + agent.DynamicDiskLink(w.diskA.String())
	dev := "/dev/" + w.dev
	out := e.outside
	// Targets aimed outside: absolute host paths, climbing paths.
	targets := []string{out, out + "/file", out + "/settings.json.tmp", filepath.Join(w.tb.Dir(), "fakeiaas/disks"),
		strings.Repeat("../", 12) + strings.TrimPrefix(out, "/"), "../../../../..", "..", "/", dev, "../../../.." + dev,
		w.cloud.DiskFile(w.diskB), "/var/vcap/bosh", "/proc/self/root"}
	paths := []string{"/var/vcap/bosh/settings.json", "/var/vcap/bosh/settings.json.tmp", "/var/vcap/bosh", "/var/vcap/data/dynamic_disks",
		link, "/var/vcap/data/dynamic_disks/" + w.diskB.String(), "/var/vcap/data", "/var/vcap/store", "/x", "/x/y", "/tmp",
		"/var/vcap/bosh/persistent_disk_hints.json.tmp", "/var/vcap/data/dynamic_disks.tmp"}
	deep := strings.Repeat("/a", 900)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t.tried()
		p, q, target := pick(r, paths), pick(r, paths), pick(r, targets)
		name := pick(r, hostileNames)
		var input string
		var opErr error
		mustRefuse := false
		switch r.IntN(12) {
		case 0:
			input = fmt.Sprintf("symlink %s -> %s", p, target)
			_ = w.sftp.Remove(p)
			opErr = w.sftp.Symlink(target, p)
			if opErr == nil { // then write and read through it
				if f, err := w.sftp.Create(p + pick(r, []string{"", "/file", "/settings.json.tmp"})); err == nil {
					_, _ = f.Write([]byte("written through a planted link"))
					_ = f.Close()
				}
			}
		case 1:
			src := pick(r, []string{dev, "/dev/disk/by-id/../../" + w.dev, "/var/vcap/data/../../../" + dev, link, "/dev/disk/by-id/virtio-" + w.diskA.String()[:20]})
			// A symlink is linked itself (link(2)): only dev/ must refuse.
			input, mustRefuse = fmt.Sprintf("hard link %s -> %s", src, q), src != link
			opErr = w.sftp.Link(src, q)
		case 2:
			src := pick(r, []string{dev, "/dev", "/dev/disk"})
			input, mustRefuse = fmt.Sprintf("rename %s -> %s", src, q), true
			opErr = w.sftp.PosixRename(src, q)
		case 3:
			input = fmt.Sprintf("rename the agent's link %s -> %s", link, q)
			opErr = w.sftp.PosixRename(link, q)
		case 4:
			input, mustRefuse = fmt.Sprintf("path with a hostile name %q", name), strings.ContainsAny(name, "\x00") || len(name) > 255
			opErr = w.sftp.Mkdir("/var/vcap/store/" + name)
			if opErr == nil {
				_ = w.sftp.RemoveDirectory("/var/vcap/store/" + name)
			}
		case 5:
			input, mustRefuse = "a path 900 components deep", true
			_, opErr = w.sftp.Stat(deep)
			mustRefuse = !errors.Is(opErr, fs.ErrNotExist) // a plain "no such file" is a clear answer too
			if !mustRefuse {
				t.expectError(input, true, "")
			}
		case 6:
			input, mustRefuse = fmt.Sprintf("open %s", target), strings.HasPrefix(target, "..") && target != ".."
			f, err := w.sftp.Open(target + "/file")
			opErr = err
			if err == nil {
				b := make([]byte, 64)
				n, _ := f.Read(b)
				_ = f.Close()
				if bytes.Contains(b[:n], []byte("keep me")) {
					t.add(OracleEscape, input, "read a sentinel file outside the root: %q", b[:n])
				}
			}
		case 7:
			input = fmt.Sprintf("rename %s -> %s", p, q)
			opErr = w.sftp.PosixRename(p, q)
		case 8:
			input = fmt.Sprintf("remove %s, mkdir %s", p, q)
			_ = w.sftp.RemoveAll(p)
			opErr = w.sftp.Mkdir(q)
		case 9:
			dp := pick(r, []string{p, dev, link, "/dev/disk/by-id/virtio-" + w.diskA.String()[:20]})
			input, mustRefuse = fmt.Sprintf("chmod 4777, truncate, touch, open O_TRUNC %s", dp), dp != p
			opErr = w.sftp.Chmod(dp, 0o4777)
			terr := w.sftp.Truncate(dp, 0)
			cerr := w.sftp.Chtimes(dp, time.Unix(1, 0), time.Unix(1, 0))
			if f, err := w.sftp.OpenFile(dp, os.O_WRONLY|os.O_TRUNC); err == nil {
				_ = f.Close()
			}
			if mustRefuse && sftpRefused(opErr) && !sftpRefused(terr) {
				opErr = terr
			}
			if mustRefuse && sftpRefused(opErr) && !sftpRefused(cerr) {
				opErr = cerr
			}
		case 10:
			input, mustRefuse = fmt.Sprintf("symlink out of the root then rename it onto %s", p), false
			_ = w.sftp.Symlink(target, "/var/vcap/data/tmp-link")
			opErr = w.sftp.PosixRename("/var/vcap/data/tmp-link", p)
		default:
			input = fmt.Sprintf("truncate %s", p)
			opErr = w.sftp.Truncate(p, 0)
		}
		if mustRefuse {
			t.expectError(input, sftpRefused(opErr), fmt.Sprintf("got %v", opErr))
		}
		// Agent actions after the user's: each must stay inside the root.
		if r.IntN(3) == 0 {
			m := pick(r, []string{"add_dynamic_disk", "remove_dynamic_disk", "dynamic_disk_usage", "restart"})
			if !w.agentUp(ctx) {
				m = "restart"
			}
			switch m {
			case "add_dynamic_disk":
				_ = w.agentAction(ctx, t, input, m, pick(r, []string{w.diskA.String(), w.diskB.String()}), map[string]string{"path": "/dev/" + w.dev})
			case "dynamic_disk_usage":
				_ = w.agentAction(ctx, t, input, m)
			case "remove_dynamic_disk":
				_ = w.agentAction(ctx, t, input, m, w.diskB.String())
			default:
				_ = w.agentAction(ctx, t, input, m)
			}
			input += " + agent " + m
		}
		before = w.checkEscape(t, input, before)
		w.alive(t, input)
		if i%10 == 9 {
			w.verify(ctx, t, input)
		}
	}
	w.verify(ctx, t, "end of area")
	return w.close()
}

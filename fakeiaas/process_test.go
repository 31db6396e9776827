package fakeiaas_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

// helperServer serves FAKEIAAS_TEST_DIR with the sqlite store, prints the
// URL and runs until killed.
func helperServer() {
	s, err := fakeiaas.Serve(fakeiaas.ServeConfig{DataDir: os.Getenv("FAKEIAAS_TEST_DIR")})
	if err != nil {
		fatalf("serve: %v", err)
	}
	fmt.Println("URL " + s.URL())
	select {}
}

// helperClient runs one VM + disk lifecycle against FAKEIAAS_TEST_URL and
// prints "ok <vm cid>".
func helperClient() {
	c := fakeiaas.NewClient(os.Getenv("FAKEIAAS_TEST_URL"))
	sc := cpiv2.MustCID[cpiv2.StemcellKind](os.Getenv("FAKEIAAS_TEST_STEMCELL"))
	ctx := fakeiaas.WithRequestID(bg, "proc-"+strconv.Itoa(os.Getpid()))
	vm, err := c.CreateVM(ctx, fakeiaas.VMSpec{AgentID: "agent", StemcellCID: sc})
	if err != nil {
		fatalf("create_vm: %v", err)
	}
	var disks []cpiv2.DiskCID
	for range 3 {
		d, err := c.CreateDisk(ctx, fakeiaas.DiskSpec{SizeMiB: 4})
		if err != nil {
			fatalf("create_disk: %v", err)
		}
		if _, err := c.AttachDisk(ctx, vm.CID, d.CID); err != nil {
			fatalf("attach_disk: %v", err)
		}
		disks = append(disks, d.CID)
	}
	got, err := c.VMDisks(ctx, vm.CID)
	if err != nil || len(got) != 3 {
		fatalf("get_disks = %v, %v; want 3", got, err)
	}
	if err := c.DetachDisk(ctx, vm.CID, disks[0]); err != nil {
		fatalf("detach_disk: %v", err)
	}
	if err := c.DeleteDisk(ctx, disks[0]); err != nil {
		fatalf("delete_disk: %v", err)
	}
	if err := c.SetVMMetadata(ctx, vm.CID, cpiv2.Metadata{"pid": strconv.Itoa(os.Getpid())}); err != nil {
		fatalf("set_vm_metadata: %v", err)
	}
	fmt.Println("ok " + vm.CID.String())
	os.Exit(0)
}

type serverProc struct {
	cmd *exec.Cmd
	url string
}

func startServerProc(t *testing.T, dir string) *serverProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FAKEIAAS_TEST_HELPER=server", "FAKEIAAS_TEST_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "URL ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("server process said %q, %v", line, err)
	}
	p := &serverProc{cmd: cmd, url: strings.TrimSpace(strings.TrimPrefix(line, "URL "))}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	return p
}

func TestDurableAcrossKill9MidWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dir := t.TempDir()
	p := startServerProc(t, dir)
	c := fakeiaas.NewClient(p.url)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, map[string]any{"device_prefix": "xvd"})
	att := mustDisk(t, c, 2)
	if _, err := c.AttachDisk(bg, vm.CID, att.CID); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acks := map[cpiv2.DiskCID]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d, err := c.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1})
				if err != nil {
					return // the server died
				}
				mu.Lock()
				acks[d.CID] = 0
				mu.Unlock()
				if err := c.SetDiskMetadata(bg, d.CID, cpiv2.Metadata{"n": strconv.Itoa(i), "w": strconv.Itoa(w)}); err != nil {
					return
				}
				mu.Lock()
				acks[d.CID] = i + 1
				mu.Unlock()
			}
		}()
	}
	time.Sleep(400 * time.Millisecond) // let writes pile up, then kill mid-write
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(acks) < 20 {
		t.Fatalf("only %d disks acknowledged before the kill; the test proves nothing", len(acks))
	}
	cloud, err := fakeiaas.New(fakeiaas.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("reopening after kill -9: %v", err)
	}
	defer cloud.Close()
	for cid, meta := range acks {
		d, err := cloud.Disk(bg, cid)
		if err != nil {
			t.Fatalf("acknowledged disk %s lost after kill -9: %v", cid, err)
		}
		if meta > 0 && d.Metadata["n"] != strconv.Itoa(meta-1) {
			t.Fatalf("acknowledged metadata of %s lost: %v, want n=%d", cid, d.Metadata, meta-1)
		}
		if _, err := os.Stat(cloud.DiskFile(cid)); err != nil {
			t.Fatalf("backing file of acknowledged disk %s: %v", cid, err)
		}
	}
	// The attachment survived, and reconcile rebuilt the layout.
	got, err := cloud.VM(bg, vm.CID)
	if err != nil || len(got.Disks) != 1 || got.Disks[0] != att.CID {
		t.Fatalf("VM after restart = %+v, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(cloud.VMRoot(vm.CID), "dev", "xvdc")); err != nil {
		t.Fatalf("device of the attached disk after restart: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "disks"))
	s, _ := cloud.State(bg)
	if len(entries) != len(s.Disks) {
		t.Fatalf("%d backing files for %d disks after reconcile", len(entries), len(s.Disks))
	}
	t.Logf("%d disks acknowledged before kill -9; all present after restart", len(acks))
}

func TestManyConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 33 processes")
	}
	srv, err := fakeiaas.Serve(fakeiaas.ServeConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := fakeiaas.NewClient(srv.URL())
	sc := mustStemcell(t, c, 2)
	const n = 32
	cmds := make([]*exec.Cmd, n)
	outs := make([]*strings.Builder, n)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "FAKEIAAS_TEST_HELPER=client", "FAKEIAAS_TEST_URL="+srv.URL(), "FAKEIAAS_TEST_STEMCELL="+sc.CID.String())
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	vms := map[string]bool{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("client process %d: %v: %s", i, err, outs[i])
		}
		f := strings.Fields(outs[i].String())
		if len(f) != 2 || f[0] != "ok" {
			t.Fatalf("client process %d said %q", i, outs[i])
		}
		vms[f[1]] = true
	}
	s, err := c.State(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != n || len(s.VMs) != n || len(s.Disks) != 2*n {
		t.Fatalf("after %d processes: %d distinct VMs reported, state has %d VMs and %d disks; want %d, %d", n, len(vms), len(s.VMs), len(s.Disks), n, 2*n)
	}
	for _, vm := range s.VMs {
		if len(vm.Disks) != 2 || vm.Metadata["pid"] == "" {
			t.Fatalf("VM %s after its process: %+v", vm.CID, vm)
		}
	}
	h, _ := c.History(bg, fakeiaas.HistoryFilter{Op: fakeiaas.OpAttachDisk}, 0)
	if len(h) != 3*n {
		t.Fatalf("history has %d attach_disk entries, want %d", len(h), 3*n)
	}
	for _, e := range h {
		if !strings.HasPrefix(e.RequestID, "proc-") {
			t.Fatalf("history entry without the caller's request_id: %+v", e)
		}
	}
}

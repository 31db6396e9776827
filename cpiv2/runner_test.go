package cpiv2_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

func newTestRunner(t *testing.T, cfg cpiv2.RunnerConfig, mode ...string) *cpiv2.Runner {
	t.Helper()
	cfg.Command = append([]string{testCPI}, mode...)
	if cfg.Timeout == 0 {
		cfg.Timeout = 20 * time.Second
	}
	return cpiv2.NewRunner(cfg)
}

func TestRunnerRoundTrip(t *testing.T) {
	var mu sync.Mutex
	var recs []cpiv2.CallRecord
	r := newTestRunner(t, cpiv2.RunnerConfig{DebugLog: func(rec cpiv2.CallRecord) {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, rec)
	}}, "serve")
	ctx := context.Background()
	cid, err := r.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 1024})
	if err != nil {
		t.Fatalf("create_disk: %v", err)
	}
	if cid.String() != "disk-1024" {
		t.Errorf("create_disk = %q, want disk-1024", cid)
	}
	if len(recs) != 2 || recs[0].Method != "info" || recs[1].Method != "create_disk" {
		t.Fatalf("calls = %+v, want info then create_disk", recs)
	}
	if !strings.Contains(string(recs[1].Stderr), "testcpi: create_disk cpi-000002 api_version=3") {
		t.Errorf("stderr of create_disk not kept as its debug log: %q", recs[1].Stderr)
	}
	// The negotiation is cached: one process for the next call.
	if _, err := r.HasVM(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-1")); err != nil {
		t.Fatalf("has_vm: %v", err)
	}
	if len(recs) != 3 {
		t.Errorf("%d calls after has_vm, want 3 (info cached)", len(recs))
	}
	// A CPI error object comes back as a *cpiv2.Error.
	err = r.DeleteDisk(ctx, cid)
	var e *cpiv2.Error
	if !errors.Is(err, cpiv2.ErrDiskNotFound) || !errors.As(err, &e) || e.Type != cpiv2.TypeDiskNotFound {
		t.Errorf("delete_disk error = %v, want a DiskNotFound *cpiv2.Error", err)
	}
}

func TestRunnerInfoBeforeEveryCall(t *testing.T) {
	n := 0
	r := newTestRunner(t, cpiv2.RunnerConfig{InfoBeforeEveryCall: true, DebugLog: func(cpiv2.CallRecord) { n++ }}, "serve")
	for range 2 {
		if _, err := r.HasVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1")); err != nil {
			t.Fatal(err)
		}
	}
	if n != 4 {
		t.Errorf("%d processes for 2 calls, want 4 (info before each)", n)
	}
}

func TestRunnerStdinClosed(t *testing.T) {
	// The CPI reads stdin to EOF before answering; it would hang (and time
	// out) if the runner left stdin open.
	r := newTestRunner(t, cpiv2.RunnerConfig{Timeout: 10 * time.Second}, "stdin")
	info, err := r.Info(context.Background())
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if len(info.StemcellFormats) != 1 || !strings.HasPrefix(info.StemcellFormats[0], "stdin-") || info.StemcellFormats[0] == "stdin-0" {
		t.Errorf("CPI read %v from stdin, want the whole request", info.StemcellFormats)
	}
}

func TestRunnerEnvScrubbed(t *testing.T) {
	t.Setenv("CPILAB_TEST_SECRET", "leak")
	t.Setenv("CPILAB_TEST_KEPT", "kept")
	t.Setenv("TMPDIR", t.TempDir())
	r := newTestRunner(t, cpiv2.RunnerConfig{ExtraEnv: []string{"CPILAB_TEST_KEPT"}}, "serve")
	props, err := r.CalculateVMCloudProperties(context.Background(), cpiv2.VMResources{CPU: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Env []string }
	if err := props.As(&got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, kv := range got.Env {
		names = append(names, strings.SplitN(kv, "=", 2)[0])
	}
	want := []string{"CPILAB_TEST_KEPT"}
	for _, n := range []string{"HOME", "PATH", "TMPDIR"} {
		if _, ok := os.LookupEnv(n); ok {
			want = append(want, n)
		}
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("CPI environment names = %v, want exactly %v", names, want)
	}
}

func TestRunnerTimeoutKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	r := newTestRunner(t, cpiv2.RunnerConfig{Timeout: 2 * time.Second, Profile: cpiv2.ProfileDirectorV1}, "grandchild", pidFile)
	start := time.Now()
	err := r.DeleteVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	var ir *cpiv2.InvalidResponseError
	if !errors.Is(err, cpiv2.ErrCPITimeout) || !errors.As(err, &ir) {
		t.Fatalf("err = %v, want an *InvalidResponseError of kind ErrCPITimeout", err)
	}
	if ir.Method != "delete_vm" || ir.RequestID != "cpi-000001" {
		t.Errorf("error names %s %s, want delete_vm cpi-000001", ir.Method, ir.RequestID)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("call took %v with a 2s timeout", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the CPI did not start its grandchild: %v", err)
	}
	pid, _ := strconv.Atoi(string(b))
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("grandchild %d still alive after the timeout killed the process group", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestRunnerOutputCap(t *testing.T) {
	r := newTestRunner(t, cpiv2.RunnerConfig{MaxOutput: 1 << 20, Profile: cpiv2.ProfileDirectorV1}, "flood")
	err := r.DeleteVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	if !errors.Is(err, cpiv2.ErrOutputTooLarge) {
		t.Fatalf("err = %v, want ErrOutputTooLarge", err)
	}
	if errors.Is(err, cpiv2.ErrCPITimeout) {
		t.Errorf("output cap reported as a timeout: %v", err)
	}
}

func TestRunnerExitStatus(t *testing.T) {
	ctx := context.Background()
	vm := cpiv2.MustCID[cpiv2.VMKind]("vm-1")
	// The Director ignores the exit status.
	d := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorCurrent}, "exit", "3")
	if ok, err := d.HasVM(ctx, vm); err != nil || !ok {
		t.Errorf("director profile: has_vm = %v, %v; want true, nil despite exit 3", ok, err)
	}
	// The CLI fails the call.
	c := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileCLI}, "exit", "3")
	_, err := c.HasVM(ctx, vm)
	var ir *cpiv2.InvalidResponseError
	if !errors.Is(err, cpiv2.ErrNonZeroExit) || !errors.As(err, &ir) || ir.ExitCode != 3 {
		t.Fatalf("cli profile: err = %v, want ErrNonZeroExit with exit code 3", err)
	}
	if ir.Method != "info" {
		t.Errorf("failing call = %s, want info (the CLI negotiates first)", ir.Method)
	}
	// A CPI exiting 0 is fine for the CLI.
	c0 := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileCLI}, "exit", "0")
	if _, err := c0.HasVM(ctx, vm); err != nil {
		t.Errorf("cli profile, exit 0: %v", err)
	}
}

func TestRunnerInvalidOutput(t *testing.T) {
	for _, tc := range []struct {
		out  string
		kind error
	}{
		{`{"result":null,"error":null,"log":""}{"result":null,"error":null,"log":""}`, cpiv2.ErrMultipleObjects},
		{`{"result":null,"error":null,"lo`, cpiv2.ErrTruncatedOutput},
		{``, cpiv2.ErrEmptyOutput},
	} {
		r := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorV1}, "raw", tc.out)
		err := r.DeleteVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
		if !errors.Is(err, tc.kind) {
			t.Errorf("stdout %q: err = %v, want kind %v", tc.out, err, tc.kind)
		}
	}
}

func TestRunnerStartFailure(t *testing.T) {
	r := cpiv2.NewRunner(cpiv2.RunnerConfig{Command: []string{filepath.Join(t.TempDir(), "missing-cpi")}, Profile: cpiv2.ProfileDirectorV1})
	err := r.DeleteVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want one wrapping os.ErrNotExist", err)
	}
	if err := cpiv2.NewRunner(cpiv2.RunnerConfig{}).DeleteVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1")); !errors.Is(err, cpiv2.ErrNoCommand) {
		t.Errorf("no command: err = %v, want ErrNoCommand", err)
	}
}

func TestRunnerConcurrent(t *testing.T) {
	r := newTestRunner(t, cpiv2.RunnerConfig{}, "serve")
	if _, err := r.Negotiate(context.Background()); err != nil {
		t.Fatal(err)
	}
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			cid, err := r.CreateDisk(context.Background(), cpiv2.CreateDiskArgs{SizeMiB: 100 + i})
			if err == nil && cid.String() != fmt.Sprintf("disk-%d", 100+i) {
				err = fmt.Errorf("call %d got %s", i, cid)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("parallel call %d: %v", i, err)
		}
	}
}

func TestRunnerProperties(t *testing.T) {
	var req []byte
	r := newTestRunner(t, cpiv2.RunnerConfig{
		Profile:      cpiv2.ProfileDirectorV1,
		DirectorUUID: "uuid-1",
		Properties:   map[string]json.RawMessage{"fakeiaas": json.RawMessage(`{"url": "http://x"}`)},
		DebugLog:     func(rec cpiv2.CallRecord) { req = rec.Request },
	}, "serve")
	if _, err := r.HasVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1")); err != nil {
		t.Fatal(err)
	}
	want := `{"method":"has_vm","arguments":["vm-1"],"context":{"director_uuid":"uuid-1","request_id":"cpi-000001","fakeiaas":{"url":"http://x"}}}`
	if string(req) != want {
		t.Errorf("request =\n%s\nwant\n%s", req, want)
	}
}

func TestRunnerLegacyNotImplemented(t *testing.T) {
	// The Director and the bosh CLI read these two old spellings as
	// NotImplemented.
	for _, out := range []string{
		`{"result":null,"error":{"type":"InvalidCall","message":"Method is not known, got: 'has_vm'","ok_to_retry":false},"log":""}`,
		`{"result":null,"error":{"type":"Bosh::Clouds::CloudError","message":"Invalid Method: has_vm","ok_to_retry":false},"log":""}`,
	} {
		r := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorV1}, "raw", out)
		_, err := r.HasVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
		if !errors.Is(err, cpiv2.ErrNotImplemented) {
			t.Errorf("%s: err = %v, want NotImplemented", out, err)
		}
	}
	// Another InvalidCall stays what it is: an error type the Director
	// does not know.
	r := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorV1}, "raw",
		`{"result":null,"error":{"type":"InvalidCall","message":"Arguments are not correct","ok_to_retry":false},"log":""}`)
	_, err := r.HasVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	var e *cpiv2.Error
	if !errors.As(err, &e) || e.Type != cpiv2.TypeInvalidCall || e.Type.Known() {
		t.Errorf("err = %v, want an unknown-to-the-Director InvalidCall", err)
	}
}

func TestRunnerContextCancelKills(t *testing.T) {
	r := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorV1}, "hang")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := r.DeleteVM(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, cpiv2.ErrCPITimeout) {
		t.Errorf("err = %v, want the context's error (not the runner's own timeout)", err)
	}
}

func TestMainExitsZeroOnErrors(t *testing.T) {
	// Under the cli profile a non-zero exit would fail the call; a Go CPI
	// served by cpiv2.Main reports its error in the response and exits 0.
	var last cpiv2.CallRecord
	r := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileCLI, DebugLog: func(rec cpiv2.CallRecord) { last = rec }}, "serve")
	err := r.DeleteDisk(context.Background(), cpiv2.MustCID[cpiv2.DiskKind]("disk-gone"))
	if !errors.Is(err, cpiv2.ErrDiskNotFound) || errors.Is(err, cpiv2.ErrNonZeroExit) {
		t.Errorf("err = %v, want the CPI's DiskNotFound", err)
	}
	if last.ExitCode != 0 || last.Method != "delete_disk" {
		t.Errorf("last call %s exited %d, want delete_disk exiting 0", last.Method, last.ExitCode)
	}
}

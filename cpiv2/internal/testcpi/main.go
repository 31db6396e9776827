// Command testcpi is a tiny CPI for cpiv2's runner tests and benchmarks. Its
// first argument picks a behaviour:
//
//	serve              a Go CPI served by cpiv2.Main (see impl)
//	exit N             serve, then exit with status N
//	raw TEXT           write TEXT to stdout, exit 0
//	hang               read nothing, never answer
//	grandchild FILE    start "testcpi hang" as a child, write its pid to FILE, hang
//	flood              write to stdout without end
//	daemon FILE        start "testcpi hang" in a new session holding stdout and
//	                   stderr, write its pid to FILE, then serve
//	leave-child FILE   start "testcpi hang" in the same process group (stdout
//	                   not inherited), write its pid to FILE, then serve
//	signal NAME        kill itself with SIGKILL, SIGTERM or SIGSEGV
//	stdin              read stdin to EOF, then answer info (hangs if stdin stays open)
//
// serve's CPI answers info with api_version 3; create_disk with
// "disk-<size>"; calculate_vm_cloud_properties with {"env": [its sorted
// environment]}; has_vm with true; delete_disk with DiskNotFound; and it
// logs one line per call to stderr.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testcpi serve|exit N|raw TEXT|hang|grandchild FILE|flood|stdin|daemon FILE|leave-child FILE|signal NAME")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		cpiv2.Main(impl{}, cpiv2.DispatcherConfig{})
	case "exit":
		code, _ := strconv.Atoi(os.Args[2])
		d := cpiv2.NewDispatcher(impl{}, cpiv2.DispatcherConfig{Log: os.Stderr})
		_ = d.Serve(context.Background(), os.Stdin, os.Stdout)
		os.Exit(code)
	case "raw":
		fmt.Fprint(os.Stdout, os.Args[2])
	case "hang":
		hang()
	case "grandchild":
		self, err := os.Executable()
		if err != nil {
			panic(err)
		}
		child := exec.Command(self, "hang")
		if err := child.Start(); err != nil {
			panic(err)
		}
		if err := os.WriteFile(os.Args[2], []byte(strconv.Itoa(child.Process.Pid)), 0o644); err != nil {
			panic(err)
		}
		hang()
	case "daemon", "leave-child":
		self, err := os.Executable()
		if err != nil {
			panic(err)
		}
		child := exec.Command(self, "hang")
		if os.Args[1] == "daemon" {
			child.Stdout, child.Stderr = os.Stdout, os.Stderr
			newSession(child)
		}
		if err := child.Start(); err != nil {
			panic(err)
		}
		if err := os.WriteFile(os.Args[2], []byte(strconv.Itoa(child.Process.Pid)), 0o644); err != nil {
			panic(err)
		}
		cpiv2.Main(impl{}, cpiv2.DispatcherConfig{})
	case "signal":
		killSelf(os.Args[2])
		hang()
	case "flood":
		chunk := make([]byte, 64<<10)
		for i := range chunk {
			chunk[i] = 'x'
		}
		for {
			if _, err := os.Stdout.Write(chunk); err != nil {
				os.Exit(0)
			}
		}
	case "stdin":
		n, _ := io.Copy(io.Discard, os.Stdin)
		fmt.Fprintf(os.Stdout, `{"result":{"stemcell_formats":["stdin-%d"],"api_version":2},"error":null,"log":""}`, n)
	default:
		fmt.Fprintf(os.Stderr, "testcpi: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

// hang blocks forever (a bare select{} would be reported as a deadlock).
func hang() {
	for {
		time.Sleep(time.Hour)
	}
}

// impl is serve's CPI: just enough to observe the runner.
type impl struct{}

func logCall(ctx context.Context, method string) {
	ci, _ := cpiv2.CallInfoFrom(ctx)
	fmt.Fprintf(os.Stderr, "testcpi: %s %s api_version=%d\n", method, ci.RequestID, ci.APIVersion)
}

func (impl) Info(ctx context.Context) (cpiv2.Info, error) {
	logCall(ctx, "info")
	return cpiv2.Info{StemcellFormats: []string{"testcpi-raw"}, APIVersion: 3}, nil
}

func (impl) CreateStemcell(ctx context.Context, a cpiv2.CreateStemcellArgs) (cpiv2.StemcellCID, error) {
	logCall(ctx, "create_stemcell")
	return cpiv2.NewStemcellCID("sc-" + a.ImagePath)
}

func (impl) DeleteStemcell(ctx context.Context, _ cpiv2.StemcellCID) error { return nil }

func (impl) CreateVM(ctx context.Context, a cpiv2.CreateVMArgs) (cpiv2.CreateVMResult, error) {
	logCall(ctx, "create_vm")
	cid, err := cpiv2.NewVMCID("vm-" + a.AgentID)
	return cpiv2.CreateVMResult{VMCID: cid, Networks: a.Networks}, err
}

func (impl) DeleteVM(ctx context.Context, _ cpiv2.VMCID) error { return nil }

func (impl) HasVM(ctx context.Context, _ cpiv2.VMCID) (bool, error) {
	logCall(ctx, "has_vm")
	return true, nil
}

func (impl) CreateDisk(ctx context.Context, a cpiv2.CreateDiskArgs) (cpiv2.DiskCID, error) {
	logCall(ctx, "create_disk")
	return cpiv2.NewDiskCID("disk-" + strconv.Itoa(a.SizeMiB))
}

func (impl) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	return cpiv2.NewError(cpiv2.TypeDiskNotFound, "disk %s not found", cid)
}

func (impl) AttachDisk(ctx context.Context, _ cpiv2.VMCID, disk cpiv2.DiskCID) (cpiv2.DiskHint, error) {
	return cpiv2.DiskHint{Path: "/dev/sdc", ID: disk.String()}, nil
}

func (impl) DetachDisk(ctx context.Context, _ cpiv2.VMCID, _ cpiv2.DiskCID) error { return nil }

func (impl) GetDisks(ctx context.Context, _ cpiv2.VMCID) ([]cpiv2.DiskCID, error) { return nil, nil }

func (impl) CalculateVMCloudProperties(ctx context.Context, _ cpiv2.VMResources) (cpiv2.CloudProps, error) {
	env := os.Environ()
	sort.Strings(env)
	return cpiv2.NewCloudProps(map[string]any{"env": env})
}

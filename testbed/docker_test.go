package testbed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
)

// dockerCPIEnv names the BOSH Docker CPI binary; the tests that run it
// skip, saying why, without it.
const dockerCPIEnv = "CPILAB_DOCKER_CPI"

func dockerCPI(t *testing.T) string {
	t.Helper()
	p := os.Getenv(dockerCPIEnv)
	if p == "" {
		t.Skipf("the BOSH Docker CPI binary is not given (set %s=PATH; docs/docker.md says how to build it)", dockerCPIEnv)
	}
	return p
}

// The Docker testbed's pieces, without the CPI: the config the Docker CPI
// reads and the stemcell tarball it imports.
func TestDockerConfigAndStemcell(t *testing.T) {
	tb, err := Start(Config{Docker: true, NoSSH: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	p, err := tb.DockerCPIConfig()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !strings.Contains(string(b), tb.Docker.Host()) || !strings.Contains(string(b), tb.MbusURL()) || !strings.Contains(string(b), `"api_version": "`+DockerAPIVersion+`"`) {
		t.Errorf("Docker CPI config %s: %s, %v", p, b, err)
	}
	if _, err := tb.DockerStemcell(2); err != nil {
		t.Fatal(err)
	}
	tb2, err := Start(Config{NoSSH: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tb2.Close()
	if _, err := tb2.DockerCPIConfig(); err == nil {
		t.Error("DockerCPIConfig without the Docker face succeeded")
	}
}

// The real Docker CPI on the Docker testbed, as the Director drives it:
// the agent boots from the file the CPI wrote, comes back after attach_disk
// recreated its container, binds the volume at /var/vcap/store, and the
// oracle sees the container, the volume and where it is bound.
func TestDockerCPIAgentFollowsAttach(t *testing.T) {
	cpiPath := dockerCPI(t)
	tb, err := Start(Config{Docker: true, NoSSH: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	cfgPath, err := tb.DockerCPIConfig()
	if err != nil {
		t.Fatal(err)
	}
	img, err := tb.DockerStemcell(2)
	if err != nil {
		t.Fatal(err)
	}
	cpi := cpiv2.NewRunner(cpiv2.RunnerConfig{Command: []string{cpiPath, "-configPath", cfgPath}, Timeout: time.Minute})
	ctx := context.Background()
	sc, err := cpi.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: img})
	if err != nil {
		t.Fatal(err)
	}
	sCfg, err := tb.DockerSuiteConfig([]string{cpiPath})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cpi.CreateVM(ctx, cpiv2.CreateVMArgs{AgentID: "agent-docker-1", StemcellCID: sc, Networks: sCfg.Env.Networks})
	if err != nil {
		t.Fatal(err)
	}
	agents := Agents{tb}
	ping := func(when string) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := agents.Ping(pctx, "agent-docker-1"); err != nil {
			t.Fatalf("%s: ping: %v", when, err)
		}
	}
	ping("after create_vm")
	disk, err := cpi.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 64, VMCID: res.VMCID})
	if err != nil {
		t.Fatal(err)
	}
	hint, err := cpi.AttachDisk(ctx, res.VMCID, disk)
	if err != nil {
		t.Fatal(err)
	}
	ping("after attach_disk (the container was recreated)")
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := agents.Run(rctx, "agent-docker-1", "add_persistent_disk", disk.String(), hint); err != nil {
		t.Fatalf("add_persistent_disk: %v", err)
	}
	if _, err := agents.Run(rctx, "agent-docker-1", "mount_disk", disk.String()); err != nil {
		t.Fatalf("mount_disk: %v", err)
	}
	od, ok, err := sCfg.Oracle.Disk(ctx, disk.String())
	if err != nil || !ok || od.AttachedTo != res.VMCID.String() || od.Path != "/warden-cpi-dev/"+disk.String() || od.Path != hint.Path {
		t.Errorf("oracle disk %s: %+v, %v, %v; hint %+v", disk, od, ok, err, hint)
	}
	vmCID, _ := tb.Docker.Face().ContainerVM(res.VMCID.String())
	root := tb.IaaS.Cloud().VMRoot(vmCID)
	if err := os.WriteFile(filepath.Join(root, "var/vcap/store/data"), []byte("on the volume"), 0o644); err != nil {
		t.Fatalf("writing under /var/vcap/store: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(hint.Path), "data")); err != nil || string(b) != "on the volume" {
		t.Errorf("the file written under /var/vcap/store is not on the volume: %q, %v", b, err)
	}
	if a := tb.agents.Agent(vmCID.String()); a == nil || a.SettingsSource() != agent.SourceFile {
		t.Errorf("the agent on %s: %v", vmCID, a)
	}
	if err := cpi.DetachDisk(ctx, res.VMCID, disk); err != nil {
		t.Fatal(err)
	}
	ping("after detach_disk")
	for _, err := range []error{cpi.DeleteVM(ctx, res.VMCID), cpi.DeleteDisk(ctx, disk), cpi.DeleteStemcell(ctx, sc)} {
		if err != nil {
			t.Error(err)
		}
	}
	inv, err := sCfg.Oracle.Inventory(ctx)
	if err != nil || len(inv.VMs)+len(inv.Disks)+len(inv.Stemcells) != 0 {
		t.Errorf("left in the cloud: %+v, %v", inv, err)
	}
}

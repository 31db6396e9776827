package testbed

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

func TestStartWritesConfigsAndCloses(t *testing.T) {
	tb, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir := tb.Dir()
	p, err := tb.CPIConfig(CPISetup{APIVersionCap: 2, NoRegistry: true})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Cloud struct {
			Plugin     string                     `json:"plugin"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"cloud"`
	}
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, &cfg) != nil {
		t.Fatalf("cpi.json %s: %v\n%s", p, err, b)
	}
	var debug struct {
		CPI struct {
			APIVersion int `json:"api_version"`
		} `json:"cpi"`
	}
	_ = json.Unmarshal(cfg.Cloud.Properties["debug"], &debug)
	if cfg.Cloud.Plugin != "fakeiaas" || cfg.Cloud.Properties["registry"] != nil || debug.CPI.APIVersion != 2 {
		t.Errorf("cpi.json: %s", b)
	}
	if p2, _ := tb.CPIConfig(CPISetup{APIVersionCap: 2, NoRegistry: true}); p2 != p {
		t.Errorf("the same setup wrote a second file %s", p2)
	}
	img, err := tb.StemcellImage(1)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(img); !json.Valid(b) || strings.Contains(string(b), "api_version") {
		t.Errorf("an api_version 1 image must carry no api_version: %s", b)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left %s behind: %v", dir, err)
	}
}

// TestAgentBootsAfterSettingsAppear checks the boot hook: a VM whose
// settings are written only after create_vm (the v1 registry flow) still
// gets an agent that answers ping.
func TestAgentBootsAfterSettingsAppear(t *testing.T) {
	tb, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	ctx := context.Background()
	img, err := tb.StemcellImage(1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(img)
	cl := tb.IaaS.Cloud()
	sc, err := cl.CreateStemcell(ctx, fakeiaas.StemcellSpec{ImagePath: img, Image: b})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := cl.CreateVM(ctx, fakeiaas.VMSpec{AgentID: "agent-boot-test", StemcellCID: sc.CID})
	if err != nil {
		t.Fatal(err)
	}
	settings, _ := json.Marshal(map[string]any{"agent_id": "agent-boot-test", "vm": map[string]string{"name": vm.CID.String()},
		"mbus": tb.MbusURL(), "disks": map[string]any{"system": "/dev/sda", "persistent": map[string]any{}}})
	if err := cl.PutSettings(ctx, vm.CID.String(), settings); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := (Agents{tb}).Ping(pctx, "agent-boot-test"); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := cl.DeleteVM(ctx, cpiv2.MustCID[cpiv2.VMKind](vm.CID.String())); err != nil {
		t.Fatal(err)
	}
}

package cpisuite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadCloudFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cloud.yml")
	yml := `cpi:
  command: [/opt/cpi/bin/cpi, --verbose]
  config: /etc/cpi.json
stemcells:
  2: {image: /tmp/image, cloud_properties: {architecture: x86_64}}
vm_cloud_properties: {instance_type: t3.small}
networks:
  default: {type: manual, ip: 10.0.0.10, netmask: 255.255.255.0, cloud_properties: {subnet: s-1}}
disk_size_mib: 2048
timeouts: {call: 5m}
`
	if err := os.WriteFile(p, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cf, err := LoadCloudFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cf.Config()
	if err != nil {
		t.Fatal(err)
	}
	argv, err := cfg.CPI.command(Switch{APIVersionCap: 1})
	if err != nil || strings.Join(argv, " ") != "/opt/cpi/bin/cpi --verbose -configPath /etc/cpi.json" {
		t.Errorf("argv %q, %v", argv, err)
	}
	if cfg.Env.Stemcells[2].ImagePath != "/tmp/image" || string(cfg.Env.Stemcells[2].CloudProperties.Raw()) != `{"architecture":"x86_64"}` {
		t.Errorf("stemcells %+v", cfg.Env.Stemcells)
	}
	if n := cfg.Env.Networks["default"]; n.IP != "10.0.0.10" || n.Type != "manual" || string(n.CloudProperties.Raw()) != `{"subnet":"s-1"}` {
		t.Errorf("networks %+v", cfg.Env.Networks)
	}
	if cfg.Env.DiskSizeMiB != 2048 || cfg.Timeouts.Call != 5*time.Minute || cfg.Oracle != nil || cfg.Faults != nil || cfg.Agents != nil || cfg.Files != nil {
		t.Errorf("config %+v", cfg)
	}
	if ipOf(cfg.Env.Networks) != "10.0.0.10" {
		t.Errorf("VM IP from the networks: %q", ipOf(cfg.Env.Networks))
	}

	for name, bad := range map[string]string{
		"unknown key":     "cpi: {command: [x]}\nstemcells: {2: {image: i}}\nstemcels: {}\n",
		"no command":      "stemcells: {2: {image: i}}\n",
		"no stemcell":     "cpi: {command: [x]}\n",
		"ssh with no key": "cpi: {command: [x]}\nstemcells: {2: {image: i}}\nssh: {user: root}\n",
	} {
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		cf, err := LoadCloudFile(p)
		if err == nil {
			_, err = cf.Config()
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/cpilab/cpilab/agent"
)

func init() {
	commands["agent"] = command{summary: "run one reference agent on a VM root, as its own process", run: runAgent}
}

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agent", stderr)
	var cfg agent.Config
	var mode string
	fs.StringVar(&cfg.Root, "root", "", "the VM root directory (required)")
	fs.StringVar(&cfg.VMCID, "vm-cid", "", "the VM's CID (required)")
	fs.StringVar(&cfg.AgentID, "agent-id", "", "expected agent_id (default: from the settings)")
	fs.StringVar(&cfg.MetadataURL, "metadata-url", "", "metadata service, e.g. http://127.0.0.1:PORT/metadata (v2 stemcells)")
	fs.StringVar(&cfg.RegistryURL, "registry-url", "", "registry endpoint, e.g. http://127.0.0.1:PORT/registry")
	fs.StringVar(&cfg.RegistryUser, "registry-user", "", "registry basic-auth user")
	fs.StringVar(&cfg.RegistryPassword, "registry-password", "", "registry basic-auth password")
	fs.IntVar(&cfg.StemcellAPIVersion, "stemcell-api-version", 2, "stemcell api_version: 2 reads the metadata service first, 1 the registry only")
	fs.StringVar(&cfg.DeviceResolver, "device-resolver", "identity", "device path resolver: identity, virtio, mapped or scsi")
	fs.StringVar(&mode, "mode", string(agent.ModeNormal), "normal, or old (answers add_dynamic_disk with 'unknown message')")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.Root == "" || cfg.VMCID == "" {
		return usageError(fs, "--root and --vm-cid are required")
	}
	switch agent.Mode(mode) {
	case agent.ModeNormal, agent.ModeOld:
		cfg.Mode = agent.Mode(mode)
	default:
		return usageError(fs, "--mode %q: want normal or old", mode)
	}
	a, err := agent.Start(cfg)
	if err != nil {
		return err
	}
	if !newUI(fs, stdout, stderr).quiet {
		fmt.Fprintf(stdout, "agent %s on VM %s (settings from %s); listening on the mbus\n", a.AgentID(), cfg.VMCID, a.SettingsSource())
	}
	<-ctx.Done()
	a.Stop()
	return nil
}

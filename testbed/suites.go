package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpimodel"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/vmssh"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// SuiteConfig returns a cpisuite.Config that certifies the CPI run by command
// (e.g. {"bin/fakeiaas-cpi"}) on this testbed: one cpi.json per setup
// (invoked as command -configPath FILE), stemcells of api_version 1 and 2,
// and the oracle, agents, SFTP access and faults of the testbed.
func (t *Testbed) SuiteConfig(command []string) (cpisuite.Config, error) {
	s1, err := t.StemcellImage(1)
	if err != nil {
		return cpisuite.Config{}, err
	}
	s2, err := t.StemcellImage(2)
	if err != nil {
		return cpisuite.Config{}, err
	}
	byResolver := map[string]map[int]cpisuite.Stemcell{}
	for _, r := range []string{agent.ResolverIdentity, agent.ResolverMapped, agent.ResolverVirtio, agent.ResolverSCSI} {
		byResolver[r] = map[int]cpisuite.Stemcell{}
		for _, v := range []int{1, 2} {
			img, err := t.StemcellImageFor(v, r)
			if err != nil {
				return cpisuite.Config{}, err
			}
			byResolver[r][v] = cpisuite.Stemcell{ImagePath: img}
		}
	}
	cfg := cpisuite.Config{
		CPI: cpisuite.Target{
			Command: command,
			ConfigPath: func(s cpisuite.Switch) (string, error) {
				return t.CPIConfig(CPISetup{APIVersionCap: s.APIVersionCap, NoRegistry: s.NoRegistry})
			},
		},
		Env: cpisuite.Environment{
			Stemcells: map[int]cpisuite.Stemcell{1: {ImagePath: s1}, 2: {ImagePath: s2}},
			// Small sparse disks: fakeiaas backs them with sparse files.
			DiskSizeMiB: 64, ResizeToMiB: 128,
			// Disk cloud_properties the oracle can check were kept.
			DiskCloudProperties: cpiv2.MustCloudProps(map[string]string{"type": "cpilab-ssd"}),
			// Every hint style of the embedded cloud (docs/seams.md).
			HintStyles: map[string]cpiv2.CloudProps{
				"path":      cpiv2.MustCloudProps(map[string]string{"disk_hint": "path"}),
				"string":    cpiv2.MustCloudProps(map[string]string{"disk_hint": "string"}),
				"id":        cpiv2.MustCloudProps(map[string]string{"disk_hint": "id"}),
				"volume_id": cpiv2.MustCloudProps(map[string]string{"disk_hint": "volume_id"}),
				"lun":       cpiv2.MustCloudProps(map[string]string{"disk_hint": "lun"}),
			},
			// Identity and mapped agents can only use the hint's path; the
			// SCSI agent gets the SCSI target, so that there too only the
			// hint leads to the disk (no by-id link is consulted).
			ResolverStemcells: byResolver,
			ResolverVMCloudProperties: map[string]cpiv2.CloudProps{
				agent.ResolverIdentity: cpiv2.MustCloudProps(map[string]string{"disk_hint": "path"}),
				agent.ResolverMapped:   cpiv2.MustCloudProps(map[string]string{"disk_hint": "string", "device_prefix": "xvd"}),
				agent.ResolverSCSI:     cpiv2.MustCloudProps(map[string]string{"disk_hint": "volume_id"}),
			},
		},
		Oracle: Oracle{t.IaaS.Cloud()},
		Faults: Faults{t.IaaS.Cloud()},
	}
	if t.agents != nil {
		cfg.Agents = Agents{t}
	}
	if t.SSH != nil {
		cfg.Files = Files{t}
	}
	return cfg, nil
}

// Oracle is the fakeiaas oracle as a cpisuite.Oracle.
type Oracle struct{ Cloud *fakeiaas.Cloud }

var _ cpisuite.Oracle = Oracle{}

// Inventory lists every object in the fake cloud.
func (o Oracle) Inventory(ctx context.Context) (cpisuite.Inventory, error) {
	s, err := o.Cloud.State(ctx)
	if err != nil {
		return cpisuite.Inventory{}, err
	}
	var inv cpisuite.Inventory
	for _, x := range s.Stemcells {
		inv.Stemcells = append(inv.Stemcells, x.CID.String())
	}
	for _, x := range s.VMs {
		inv.VMs = append(inv.VMs, x.CID.String())
	}
	for _, x := range s.Disks {
		inv.Disks = append(inv.Disks, x.CID.String())
	}
	for _, x := range s.Snapshots {
		inv.Snapshots = append(inv.Snapshots, x.CID.String())
	}
	return inv, nil
}

// VM returns a VM's metadata and attachments.
func (o Oracle) VM(ctx context.Context, cid string) (cpisuite.OracleVM, bool, error) {
	vmCID, err := cpiv2.NewVMCID(cid)
	if err != nil {
		return cpisuite.OracleVM{}, false, err
	}
	vm, err := o.Cloud.VM(ctx, vmCID)
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return cpisuite.OracleVM{}, false, nil
	}
	if err != nil {
		return cpisuite.OracleVM{}, false, err
	}
	out := cpisuite.OracleVM{Metadata: map[string]string(vm.Metadata), CloudProperties: vm.CloudProperties, Disks: map[string]string{}, Boots: vm.Boots,
		Size: &cpisuite.OracleVMSize{CPU: vm.Size.CPU, RAMMiB: vm.Size.RAMMiB, EphemeralDiskMiB: vm.Size.EphemeralDiskMiB}}
	for _, a := range vm.Attachments {
		out.Disks[a.DiskCID.String()] = a.Device
	}
	return out, true, nil
}

// Disk returns a disk's size, metadata and attachment.
func (o Oracle) Disk(ctx context.Context, cid string) (cpisuite.OracleDisk, bool, error) {
	diskCID, err := cpiv2.NewDiskCID(cid)
	if err != nil {
		return cpisuite.OracleDisk{}, false, err
	}
	d, err := o.Cloud.Disk(ctx, diskCID)
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return cpisuite.OracleDisk{}, false, nil
	}
	if err != nil {
		return cpisuite.OracleDisk{}, false, err
	}
	lun := -1
	if d.Device != "" {
		lun = d.LUN
	}
	return cpisuite.OracleDisk{SizeMiB: d.SizeMiB, Metadata: map[string]string(d.Metadata), CloudProperties: d.CloudProperties,
		AttachedTo: d.VMCID.String(), Device: d.Device, LUN: lun}, true, nil
}

var _ cpisuite.SnapshotSources = Oracle{}

// SnapshotSource returns the disk a snapshot was taken of.
func (o Oracle) SnapshotSource(ctx context.Context, cid string) (string, bool, error) {
	s, err := o.Cloud.State(ctx)
	if err != nil {
		return "", false, err
	}
	for _, x := range s.Snapshots {
		if x.CID.String() == cid {
			return x.DiskCID.String(), true, nil
		}
	}
	return "", false, nil
}

// Settings returns the registry entry, the number of registry writes and
// the user-data of a VM.
func (o Oracle) Settings(ctx context.Context, vmCID string) (cpisuite.OracleSettings, error) {
	s, err := o.Cloud.State(ctx)
	if err != nil {
		return cpisuite.OracleSettings{}, err
	}
	var out cpisuite.OracleSettings
	if r, ok := s.Registry[vmCID]; ok {
		out.Registry = r
	}
	puts, err := o.Cloud.History(ctx, fakeiaas.HistoryFilter{Op: fakeiaas.OpRegistryPut, Target: vmCID}, 0)
	if err != nil {
		return cpisuite.OracleSettings{}, err
	}
	for _, h := range puts {
		if h.Result == "ok" {
			out.RegistryWrites++
		}
	}
	for _, vm := range s.VMs {
		if vm.CID.String() == vmCID && len(vm.UserData) > 0 && string(vm.UserData) != "null" {
			out.UserData = vm.UserData
		}
	}
	return out, nil
}

// Faults injects fakeiaas fault rules.
type Faults struct{ Cloud *fakeiaas.Cloud }

// FailVMCreations makes the next n VM creations fail as a transient
// capacity error (VMCreationFailed, ok_to_retry), as a cloud out of
// capacity in a zone does.
func (f Faults) FailVMCreations(ctx context.Context, n int) (func() error, error) {
	r, err := f.Cloud.AddFault(ctx, fakeiaas.Rule{Op: fakeiaas.OpCreateVM, Times: n, Effect: fakeiaas.Effect{
		Kind: fakeiaas.EffectError, ErrorType: cpiv2.TypeVMCreationFailed, OkToRetry: true,
		Message: "insufficient capacity in the zone (injected by cpilab)",
	}})
	if err != nil {
		return nil, err
	}
	return func() error {
		if err := f.Cloud.RemoveFault(context.Background(), r.ID); err != nil && !errors.Is(err, fakeiaas.ErrNotFound) {
			return err
		}
		return nil
	}, nil
}

// Hold pauses every fakeiaas request of one kind (a fakeiaas pause rule)
// until the gate is released.
func (f Faults) Hold(ctx context.Context, method string) (cpisuite.Gate, error) {
	r, err := f.Cloud.AddFault(ctx, fakeiaas.Rule{Op: fakeiaas.Op(method), Effect: fakeiaas.Effect{Kind: fakeiaas.EffectPause}})
	if err != nil {
		return nil, err
	}
	return gate{cloud: f.Cloud, id: r.ID}, nil
}

type gate struct {
	cloud *fakeiaas.Cloud
	id    string
}

func (g gate) Waiting(ctx context.Context) (int, error) {
	rules, err := g.cloud.Faults(ctx)
	if err != nil {
		return 0, err
	}
	for _, r := range rules {
		if r.Rule.ID == g.id {
			return r.Paused, nil
		}
	}
	return 0, fmt.Errorf("testbed: pause rule %s is gone", g.id)
}

func (g gate) Release(ctx context.Context) error {
	err := g.cloud.RemoveFault(ctx, g.id)
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return nil
	}
	return err
}

// Agents reaches the testbed's agents over its embedded NATS.
type Agents struct{ t *Testbed }

// Ping waits until the agent answers ping, up to ctx's deadline (30 s
// without one); on failure it says why the agent did not start.
func (a Agents) Ping(ctx context.Context, agentID string) error {
	timeout := 30 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	err := a.t.mbusCli.WaitUntilReady(agentID, timeout)
	if err != nil && a.t.agents != nil {
		if vm := a.vmOf(ctx, agentID); vm != "" {
			if berr := a.t.agents.LastError(vm); berr != nil {
				return fmt.Errorf("%w (the agent on %s did not start: %v)", err, vm, berr)
			}
		}
	}
	return err
}

func (a Agents) vmOf(ctx context.Context, agentID string) string {
	if a.t.Docker != nil {
		return a.t.dockerVMOf(agentID)
	}
	s, err := a.t.IaaS.Cloud().State(ctx)
	if err != nil {
		return ""
	}
	for _, vm := range s.VMs {
		if vm.AgentID == agentID {
			return vm.CID.String()
		}
	}
	return ""
}

// Run runs an agent action and waits for its value.
func (a Agents) Run(ctx context.Context, agentID, method string, args ...any) (json.RawMessage, error) {
	type result struct {
		v   json.RawMessage
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := a.t.mbusCli.Run(agentID, method, args...)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("agent %s: %s: %w", agentID, method, ctx.Err())
	}
}

// Files opens VM file systems over the testbed's SFTP server.
type Files struct{ t *Testbed }

// Open logs in to the VM over SSH and starts SFTP.
func (f Files) Open(ctx context.Context, vm cpisuite.VMAccess) (cpisuite.VMFS, error) {
	c, err := vmssh.Dial(vmssh.ClientConfig{Addr: f.t.SSH.Addr(), VMCID: vm.VMCID, Signer: f.t.signer, HostKey: f.t.SSH.HostKey()})
	if err != nil {
		return nil, err
	}
	return cpisuite.SFTPFS(c.Client, c), nil
}

var _ cpisuite.WholeState = Oracle{}

// ModelState reads the whole fake cloud as the contract's model sees it.
func (o Oracle) ModelState(ctx context.Context) (cpimodel.State, error) {
	s, err := o.Cloud.State(ctx)
	if err != nil {
		return cpimodel.State{}, err
	}
	return s.Model(), nil
}

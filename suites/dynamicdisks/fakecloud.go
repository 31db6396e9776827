package dynamicdisks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"

	"golang.org/x/crypto/ssh"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/vmssh"
)

// FakeCloud gives the suite the oracle and the gates of a fake cloud
// served by `cpilab fakeiaas` at url, which a director under test drives
// (a `cpilab director --cpi-config` of that cloud): what the IaaS really
// holds, read from its oracle, and its create_disk and create_vm held by
// pause fault rules.
func FakeCloud(url string) (Oracle, Gates) {
	c := fakeiaas.NewClient(url)
	return cloudOracle{c: c, where: " at " + url}, cloudGates{c}
}

// fakeCloud is what the oracle and the gates read of a fake cloud: in
// this process (*fakeiaas.Cloud) or over its HTTP API (*fakeiaas.Client).
type fakeCloud interface {
	State(ctx context.Context) (fakeiaas.State, error)
	AddFault(ctx context.Context, r fakeiaas.Rule) (fakeiaas.Rule, error)
	Faults(ctx context.Context) ([]fakeiaas.RuleStatus, error)
	RemoveFault(ctx context.Context, id string) error
}

// cloudOracle reads the fake cloud's state; where says which cloud in
// errors.
type cloudOracle struct {
	c     fakeCloud
	where string
}

func (o cloudOracle) Disk(ctx context.Context, cid string) (OracleDisk, bool, error) {
	st, err := o.c.State(ctx)
	if err != nil {
		return OracleDisk{}, false, fmt.Errorf("fakeiaas oracle%s: %w", o.where, err)
	}
	for _, d := range st.Disks {
		if d.CID.String() == cid {
			return OracleDisk{AttachedTo: d.VMCID.String(), Metadata: d.Metadata}, true, nil
		}
	}
	return OracleDisk{}, false, nil
}

func (o cloudOracle) Disks(ctx context.Context) ([]string, error) {
	st, err := o.c.State(ctx)
	if err != nil {
		return nil, fmt.Errorf("fakeiaas oracle%s: %w", o.where, err)
	}
	out := make([]string, 0, len(st.Disks))
	for _, d := range st.Disks {
		out = append(out, d.CID.String())
	}
	return out, nil
}

// cloudGates hold the fake cloud's operations with pause fault rules.
type cloudGates struct{ c fakeCloud }

func (g cloudGates) Hold(ctx context.Context, op string) (Gate, error) {
	r, err := g.c.AddFault(ctx, fakeiaas.Rule{Op: fakeiaas.Op(op), Effect: fakeiaas.Effect{Kind: fakeiaas.EffectPause}})
	if err != nil {
		return nil, err
	}
	return cloudGate{c: g.c, id: r.ID}, nil
}

type cloudGate struct {
	c  fakeCloud
	id string
}

func (g cloudGate) Held(ctx context.Context) (int, error) {
	all, err := g.c.Faults(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range all {
		if s.ID == g.id {
			return s.Paused, nil
		}
	}
	return 0, nil // released
}

func (g cloudGate) Release(ctx context.Context) error {
	err := g.c.RemoveFault(ctx, g.id)
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return nil // released before
	}
	return err
}

// SFTPLinks reads the agent's dynamic disk links over SFTP onto the VMs of
// a fake cloud (its vmssh server at addr, logging in with the client key
// `cpilab fakeiaas` wrote to keyFile).
func SFTPLinks(addr, keyFile string) (Links, error) {
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("dynamicdisks: SFTP key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, fmt.Errorf("dynamicdisks: SFTP key %s: %w", keyFile, err)
	}
	return sftpLinks{addr: addr, signer: signer}, nil
}

type sftpLinks struct {
	addr   string
	signer ssh.Signer
}

func (l sftpLinks) DynamicDiskLink(_ context.Context, vm VM, diskCID string) (string, bool, error) {
	// No host key: the fake cloud's SFTP server listens on loopback, next
	// to the fakeiaas the operator named (vmssh.ClientConfig.HostKey).
	c, err := vmssh.Dial(vmssh.ClientConfig{Addr: l.addr, VMCID: vm.VMCID, Signer: l.signer})
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	link := path.Join("/", agent.DynamicDiskLink(diskCID))
	target, err := c.ReadLink(link)
	if err != nil {
		if _, serr := c.Lstat(link); serr != nil {
			return "", false, nil // no link
		}
		return "", false, err
	}
	return target, true, nil
}

package dynamicdisks

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

// InProcessCloud gives the suite the oracle, the agents' links and the
// gates of a fake cloud running in this process (a director a test or
// certify-director's embedded director launched here): the same checks
// FakeCloud and SFTPLinks give for a cloud served elsewhere.
func InProcessCloud(c *fakeiaas.Cloud) (Oracle, Links, Gates) {
	return cloudOracle{c: c}, labLinks{c}, cloudGates{c}
}

// labLinks reads the agent's links in the VM roots fakeiaas keeps (the
// file system an SFTP session onto the VM shows).
type labLinks struct{ c *fakeiaas.Cloud }

func (k labLinks) DynamicDiskLink(_ context.Context, vm VM, diskCID string) (string, bool, error) {
	vmCID, err := cpiv2.NewVMCID(vm.VMCID)
	if err != nil {
		return "", false, err
	}
	target, err := os.Readlink(filepath.Join(k.c.VMRoot(vmCID), agent.DynamicDiskLink(diskCID)))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	return target, err == nil, err
}

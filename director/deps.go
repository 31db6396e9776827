package director

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/mbus"
)

// CPI is the part of cpiv2.CPI the director calls. Every cpiv2.CPI (the exec
// runner, the in-process loopback, the reference CPI) satisfies it. Calls
// about a VM carry its stemcell's api_version (cpiv2.WithStemcellAPIVersion).
type CPI interface {
	CreateStemcell(ctx context.Context, args cpiv2.CreateStemcellArgs) (cpiv2.StemcellCID, error)
	CreateVM(ctx context.Context, args cpiv2.CreateVMArgs) (cpiv2.CreateVMResult, error)
	DeleteVM(ctx context.Context, cid cpiv2.VMCID) error
	CreateDisk(ctx context.Context, args cpiv2.CreateDiskArgs) (cpiv2.DiskCID, error)
	DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error
	HasDisk(ctx context.Context, cid cpiv2.DiskCID) (bool, error)
	AttachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) (cpiv2.DiskHint, error)
	DetachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) error
	SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) error
	GetDisks(ctx context.Context, vm cpiv2.VMCID) ([]cpiv2.DiskCID, error)
}

var _ CPI = cpiv2.CPI(nil)

// DiskLister is optional: a CPI (or IaaS adapter) that can list every disk
// lets restart reconciliation find a disk whose create_disk returned just
// before a crash, before its CID reached the store, and track it as an
// orphan. Without it, only attached disks are found (through get_disks).
type DiskLister interface {
	ListDisks(ctx context.Context) ([]cpiv2.DiskCID, error)
}

// Agents is the director's view of the agents on its VMs (the agent protocol),
// reached through the mbus. *mbus.Client satisfies it.
type Agents interface {
	// WaitUntilReady blocks until the agent answers a ping, or timeout has
	// passed on the runtime's clock (then it returns an error).
	WaitUntilReady(agentID string, timeout time.Duration) error
	// Run sends method with args to the agent, waits for the final answer
	// (polling get_task for long actions) and returns its value. An agent
	// that does not know method returns an error for which
	// IsUnknownMessage holds.
	Run(agentID, method string, args ...any) (json.RawMessage, error)
}

// ErrUnknownMessage is the error an agent's "unknown message <m>" exception
// maps to. Agents implementations wrap it, or return an error with an
// UnknownMessage() bool method.
var ErrUnknownMessage = errors.New("unknown message")

// IsUnknownMessage reports whether err is an agent's "unknown message"
// answer: it wraps ErrUnknownMessage or mbus.ErrUnknownMessage, or has an
// UnknownMessage method returning true.
func IsUnknownMessage(err error) bool {
	if errors.Is(err, ErrUnknownMessage) || errors.Is(err, mbus.ErrUnknownMessage) {
		return true
	}
	var u interface{ UnknownMessage() bool }
	return errors.As(err, &u) && u.UnknownMessage()
}

// Agent methods the director sends.
const (
	agentAddDynamicDisk    = "add_dynamic_disk"
	agentRemoveDynamicDisk = "remove_dynamic_disk"
	agentStop              = "stop"
	agentStart             = "start"
)

var _ Agents = (*mbus.Client)(nil)

package cpisuite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// Config is everything the suites need to certify one CPI. Only CPI and
// Env.Stemcells are required; every optional piece that is missing turns
// the specs that need it into skips that say so.
type Config struct {
	// CPI is the CPI under test.
	CPI Target
	// Env describes the cloud the CPI talks to: stemcells, cloud
	// properties, networks, sizes.
	Env Environment
	// Oracle inspects the IaaS directly (the embedded fakeiaas). nil on a
	// real cloud: the specs that check IaaS state are skipped and say so.
	Oracle Oracle
	// Agents reaches the agents on created VMs over the mbus. nil: the
	// matrix steps that need an agent are skipped and say so.
	Agents Agents
	// Files opens a VM's file system over SSH/SFTP. nil: the symlink and
	// data steps of the matrix are skipped and say so.
	Files VMFiles
	// Faults makes the IaaS fail on purpose (the create_vm retry spec).
	// nil: that spec is skipped.
	Faults Faults
	// Contexts are the caller profile × CPI version contexts the contract
	// suite runs in. Default: DefaultContexts.
	Contexts []ContractContext
	// Rows are the reference-table rows the matrix suite runs. Default:
	// ReferenceTable.
	Rows []Row
	// Timeouts bound every wait. Zero fields take their defaults.
	Timeouts Timeouts
	// Parallel is the number of concurrent calls in the parallel spec
	// (default 8, the contract's minimum).
	Parallel int
	// RunID prefixes every name the suites create (agent IDs, metadata), so
	// that runs never collide. Default: a random "cpilab-xxxxxxxx".
	RunID string
	// RerunCommand, when set, is the command that reruns one spec given its
	// focus regexp (shown with each failure), e.g. "cpilab certify --focus".
	RerunCommand func(focus string) string
	// Strict turns every "not checked" into a failure (for CI): a spec that
	// cannot check its clause fails, saying why, instead of being skipped.
	// What does not apply at all (update_disk at api_version 1) and what
	// the Director handles (NotSupported from resize_disk) stay skips.
	// Default false.
	Strict bool
	// RequireAPIVersion, when > 0, fails every setup whose CPI reports a
	// lower api_version in info (clause version.required). Setups that cap
	// the CPI's version on purpose are not concerned. Default 0: any.
	RequireAPIVersion int
	// Explore configures the random lifecycles of the explore row
	// (default: a small seeded budget).
	Explore Explore
	// NoModelReads, on a cloud without an oracle, leaves the contract's
	// model unchecked rather than reading the cloud through the CPI's own
	// read methods (has_vm, has_disk, get_disks) around every call.
	// Default false: the model checks what those reads show.
	NoModelReads bool
}

// Target is how to run the CPI under test.
type Target struct {
	// Command is the CPI executable and any leading arguments, e.g.
	// {"bin/fakeiaas-cpi"}. "-configPath FILE" is appended when ConfigPath
	// gives a file.
	Command []string
	// ConfigPath returns the CPI config file for a setup, or an error
	// wrapping ErrCannotSwitch when the target cannot be put into it. nil:
	// Command runs as is for every setup; the rows and contexts whose
	// api_version the CPI does not report are then skipped with the reason.
	ConfigPath func(Switch) (string, error)
	// HonoursAPIVersionCap claims that the CPI honours
	// debug.cpi.api_version in its config (the reference CPI does). With the
	// claim, a CPI that ignores the cap fails; without it, the rows it
	// cannot be switched into are skipped with the reason.
	HonoursAPIVersionCap bool
}

// Switch is one setup a CPI is run in.
type Switch struct {
	// APIVersionCap is debug.cpi.api_version (0: none, the CPI's own max).
	APIVersionCap int
	// NoRegistry leaves the registry out of the CPI config (the current
	// Director has none).
	NoRegistry bool
}

// String describes the setup for skip messages.
func (s Switch) String() string {
	reg := "with registry"
	if s.NoRegistry {
		reg = "without registry"
	}
	if s.APIVersionCap == 0 {
		return "no api_version cap, " + reg
	}
	return fmt.Sprintf("debug.cpi.api_version %d, %s", s.APIVersionCap, reg)
}

// command returns the argv for a setup.
func (t Target) command(s Switch) ([]string, error) {
	if len(t.Command) == 0 {
		return nil, errors.New("suites: Config.CPI.Command is empty")
	}
	argv := append([]string(nil), t.Command...)
	if t.ConfigPath == nil {
		return argv, nil
	}
	p, err := t.ConfigPath(s)
	if err != nil {
		return nil, err
	}
	return append(argv, "-configPath", p), nil
}

// Environment describes the cloud.
type Environment struct {
	// Stemcells by stemcell api_version (1 and 2). A missing version skips
	// the rows that need it.
	Stemcells map[int]Stemcell
	// VMCloudProperties, DiskCloudProperties: create_vm's and create_disk's
	// cloud_properties (default {}).
	VMCloudProperties   cpiv2.CloudProps
	DiskCloudProperties cpiv2.CloudProps
	// Networks is create_vm's networks (default one dynamic network
	// "default").
	Networks cpiv2.Networks
	// StaticNetworks are networks as a Director gives an instance with a
	// static IP (a manual network holding the default route, and a
	// dynamic one), for the table.settings spec that follows them to the
	// agent settings. Default: when Networks is left to its default, such
	// networks with no cloud_properties the IaaS must know; otherwise none,
	// and that spec is not applicable (Networks alone are checked).
	StaticNetworks cpiv2.Networks
	// DiskSizeMiB is the size of the disks the suites create (default 1024).
	DiskSizeMiB int
	// ResizeToMiB is the size resize_disk and update_disk grow them to
	// (default 2048).
	ResizeToMiB int
	// HintStyles names VM cloud_properties that make the CPI answer
	// attach_disk in each disk hint style it has (merged over
	// VMCloudProperties), e.g. {"lun": {"disk_hint": "lun"}} on the
	// embedded cloud. The hint spec checks every style, with two disks on
	// one VM. Default: one style, VMCloudProperties as they are.
	HintStyles map[string]cpiv2.CloudProps
	// ResolverStemcells are stemcells by agent device resolver ("identity",
	// "mapped", "virtio", "scsi") and api_version, for the reference-table
	// rows that name a resolver; ResolverVMCloudProperties are merged over
	// VMCloudProperties in those rows (a hint style the resolver can use).
	// A row whose resolver has no stemcell here uses Stemcells and says so
	// in its report (entry "resolver"). Default: none.
	ResolverStemcells         map[string]map[int]Stemcell
	ResolverVMCloudProperties map[string]cpiv2.CloudProps
}

// Stemcell is one stemcell image.
type Stemcell struct {
	ImagePath       string
	CloudProperties cpiv2.CloudProps
}

// Timeouts bound the suites' waits.
type Timeouts struct {
	// Call bounds one CPI process (default 60 s); a CPI still running is
	// killed and the call fails.
	Call time.Duration
	// Agent bounds waiting for an agent to answer ping (default 30 s).
	Agent time.Duration
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Timeouts.Call == 0 {
		c.Timeouts.Call = 60 * time.Second
	}
	if c.Timeouts.Agent == 0 {
		c.Timeouts.Agent = 30 * time.Second
	}
	if c.Parallel == 0 {
		c.Parallel = 8
	}
	if c.Env.DiskSizeMiB == 0 {
		c.Env.DiskSizeMiB = 1024
	}
	if c.Env.ResizeToMiB == 0 {
		c.Env.ResizeToMiB = 2 * c.Env.DiskSizeMiB
	}
	if c.Env.Networks == nil {
		c.Env.Networks = cpiv2.Networks{"default": {Type: "dynamic", Default: []string{"dns", "gateway"}}}
		if c.Env.StaticNetworks == nil {
			c.Env.StaticNetworks = directorNetworks()
		}
	}
	if c.Contexts == nil {
		c.Contexts = DefaultContexts
	}
	if c.Rows == nil {
		c.Rows = ReferenceTable
	}
	if c.RunID == "" {
		c.RunID = randomRunID()
	}
	return c
}

// Oracle is read-only IaaS state (the fakeiaas oracle, STYLE 12): what the
// CPI really did, never what it says it did.
type Oracle interface {
	// Inventory lists the CIDs of everything that exists in the IaaS.
	Inventory(ctx context.Context) (Inventory, error)
	// VM returns a VM's state; ok is false when the IaaS has no such VM.
	VM(ctx context.Context, cid string) (vm OracleVM, ok bool, err error)
	// Disk returns a disk's state; ok is false when there is no such disk.
	Disk(ctx context.Context, cid string) (disk OracleDisk, ok bool, err error)
	// Settings returns where the agent settings for a VM went.
	Settings(ctx context.Context, vmCID string) (OracleSettings, error)
}

// FixedMetadata is implemented by an Oracle whose IaaS cannot change a VM's
// or a disk's metadata once it exists (Docker's container and volume labels
// are set at create time): FixedMetadata says why, and the specs that check
// set_vm_metadata and set_disk_metadata against the IaaS are not
// applicable there ("" when the IaaS can change them).
type FixedMetadata interface {
	FixedMetadata() string
}

// UnseenCloudProperties is implemented by an Oracle whose IaaS keeps no
// record of the cloud_properties a VM was created with (a CPI translates
// them into the IaaS's own settings, as the Docker CPI does into a
// container's config): UnseenCloudProperties says why, and the check that
// the VM holds them is not applicable there.
type UnseenCloudProperties interface {
	UnseenCloudProperties() string
}

// SnapshotSources is implemented by an Oracle whose IaaS records which
// disk each snapshot was taken of: with it, snapshot.create-delete also
// checks that snapshot_disk snapshotted the disk it was given. Without it
// that part is not checked (a report entry says so).
type SnapshotSources interface {
	// SnapshotSource returns the CID of the disk snapshot cid was taken
	// of; ok is false when the IaaS has no such snapshot.
	SnapshotSource(ctx context.Context, cid string) (disk string, ok bool, err error)
}

// unseenCloudProperties is o's UnseenCloudProperties reason, "" when none.
func unseenCloudProperties(o Oracle) string {
	if u, ok := o.(UnseenCloudProperties); ok {
		return u.UnseenCloudProperties()
	}
	return ""
}

// fixedMetadata is o's FixedMetadata reason, "" when o has none.
func fixedMetadata(o Oracle) string {
	if f, ok := o.(FixedMetadata); ok {
		return f.FixedMetadata()
	}
	return ""
}

// Inventory is the set of IaaS objects that exist.
type Inventory struct {
	Stemcells, VMs, Disks, Snapshots []string
}

// OracleVM is a VM as the IaaS holds it.
type OracleVM struct {
	Metadata map[string]string
	// CloudProperties are the cloud_properties the VM was created with, as
	// the IaaS recorded them (nil: none, or an oracle that cannot tell).
	CloudProperties json.RawMessage
	// Disks maps each attached disk CID to its device name (e.g. "sdc").
	Disks map[string]string
	// Boots is how many times the IaaS has booted the VM (created or
	// rebooted it); 0 when the oracle cannot tell.
	Boots int
	// Size is how big the IaaS made the VM (nil: the IaaS cannot tell,
	// and vm.resources is not applicable).
	Size *OracleVMSize
}

// OracleVMSize is a VM's size as the IaaS holds it.
type OracleVMSize struct {
	CPU              int
	RAMMiB           int
	EphemeralDiskMiB int
}

// OracleDisk is a disk as the IaaS holds it.
type OracleDisk struct {
	SizeMiB  int
	Metadata map[string]string
	// CloudProperties are the cloud_properties the disk was created with,
	// as the IaaS recorded them (nil: none).
	CloudProperties json.RawMessage
	AttachedTo      string // VM CID, "" when detached
	Device          string // device name on that VM, e.g. "sdc"
	// LUN is the disk's SCSI LUN (and SCSI target) on that VM; -1 when the
	// IaaS has none.
	LUN int
	// Path, when set, is where the disk appears on that VM when it is a
	// directory rather than a block device (a volume a Docker container
	// binds, e.g. "/warden-cpi-dev/vol-1"): a hint must name it, and the
	// data the suites write goes into a file inside it. "" for devices.
	Path string
}

// OracleSettings is where a VM's agent settings are.
type OracleSettings struct {
	// Registry holds the settings the registry has for the VM (nil: none),
	// RegistryWrites how many times the CPI wrote them.
	Registry       json.RawMessage
	RegistryWrites int
	// UserData is the user-data the CPI gave at create_vm (nil: none).
	UserData json.RawMessage
	// InVM, when set, is the path of the settings file a CPI writes into
	// the VM itself (the Warden and Docker CPIs), File its content (nil
	// while not written). Such a CPI uses neither the registry nor
	// user-data, so the reference table's settings steps do not apply.
	InVM string
	File json.RawMessage
}

// Agents talks to agents over the mbus (the agent protocol).
//
// Run may fail with an error wrapping ErrNotHosted: the agents cannot
// host that action on that VM (cpilab certify --agent real: the upstream
// agent's box hosts some device resolvers only); the step is then not
// checked, saying why.
type Agents interface {
	// Ping waits, up to ctx's deadline, until the agent answers ping.
	Ping(ctx context.Context, agentID string) error
	// Run runs an agent action and waits for its value (long actions are
	// polled with get_task).
	Run(ctx context.Context, agentID, method string, args ...any) (json.RawMessage, error)
}

// ErrNotHosted is wrapped by an Agents error for an action the configured
// agents cannot host on a VM: the spec is not checked, never passed.
var ErrNotHosted = errors.New("the agents cannot host this")

// VMFiles opens a VM's file system as its user sees it over SFTP.
type VMFiles interface {
	Open(ctx context.Context, vm VMAccess) (VMFS, error)
}

// VMAccess names a VM for VMFiles.
type VMAccess struct {
	VMCID, AgentID string
	// IP is the VM's first IP address as create_vm reported it (api_version
	// 2+) or as the networks gave it; "" when neither says.
	IP string
}

// VMFS is a VM's file system, paths absolute as on the VM.
type VMFS interface {
	Readlink(path string) (string, error)
	WriteAt(path string, data []byte, off int64) error
	ReadAt(path string, n int, off int64) ([]byte, error)
	Close() error
}

// Faults makes the IaaS fail on purpose.
type Faults interface {
	// FailVMCreations makes the next n VM creations fail as a transient
	// IaaS capacity error; clear removes the fault.
	FailVMCreations(ctx context.Context, n int) (clear func() error, err error)
	// Hold makes the IaaS hold every request of one kind (a CPI method
	// name, e.g. "create_disk") before applying it, until the gate is
	// released: the parallel spec uses it to have many calls in flight at
	// once.
	Hold(ctx context.Context, method string) (Gate, error)
}

// Gate holds IaaS requests (Faults.Hold).
type Gate interface {
	// Waiting returns how many requests the gate holds now.
	Waiting(ctx context.Context) (int, error)
	// Release lets every held and later request through and removes the
	// gate.
	Release(ctx context.Context) error
}

package director

import (
	"encoding/json"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// TaskState is a task's state, as the upstream Director names them.
type TaskState string

// Task states. queued and processing are in flight; the others are final.
const (
	TaskQueued     TaskState = "queued"
	TaskProcessing TaskState = "processing"
	TaskDone       TaskState = "done"
	TaskError      TaskState = "error"
	TaskCancelled  TaskState = "cancelled"
	// TaskTimeout is the state of a task whose worker died, under
	// Knobs.NoTaskTakeover (upstream's "timeout").
	TaskTimeout TaskState = "timeout"
)

// Final reports whether the state is terminal.
func (s TaskState) Final() bool {
	return s == TaskDone || s == TaskError || s == TaskCancelled || s == TaskTimeout
}

// Queue names, as upstream's Delayed::Job queues.
const (
	QueueNormal       = "normal"
	QueueUrgent       = "urgent"
	QueueDynamicDisks = "dynamic_disks"
)

// Task is one queued job and everything it reported.
type Task struct {
	ID          int64           `json:"id"`
	Type        string          `json:"type"` // the job, e.g. "provide_dynamic_disk"
	Queue       string          `json:"queue"`
	State       TaskState       `json:"state"`
	Description string          `json:"description"`
	Deployment  string          `json:"deployment,omitempty"`
	User        string          `json:"user"`
	Args        json.RawMessage `json:"args,omitempty"`
	// Result is the task's result file (GET /tasks/:id/output?type=result):
	// {"disk_cid"} for provide and create, none for the other disk jobs.
	Result json.RawMessage `json:"result,omitempty"`
	// Message is what the job returned on success (the API's "result").
	Message string `json:"message,omitempty"`
	// Error is why it failed.
	Error     string      `json:"error,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
	StartedAt time.Time   `json:"started_at,omitzero"`
	EndedAt   time.Time   `json:"ended_at,omitzero"`
	Events    []TaskEvent `json:"events,omitempty"`
	Debug     []string    `json:"debug,omitempty"`
	// Owner is the director process running the task and LeaseExpiresAt
	// when its claim lapses unless renewed (Config.Shared only).
	Owner          string    `json:"owner,omitempty"`
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
}

// TaskEvent is one line of a task's event log.
type TaskEvent struct {
	Time  time.Time `json:"time"`
	Stage string    `json:"stage"`
	Task  string    `json:"task"`
	State string    `json:"state"` // started, finished, failed
	Error string    `json:"error,omitempty"`
}

// Stemcell is an uploaded stemcell.
type Stemcell struct {
	Name            string           `json:"name"`
	Version         string           `json:"version"`
	OS              string           `json:"operating_system,omitempty"`
	APIVersion      int              `json:"api_version"` // from stemcell.MF; 1 when absent
	CID             string           `json:"cid"`
	CloudProperties cpiv2.CloudProps `json:"cloud_properties"`
}

// stemcellKey is the store key of a stemcell.
func stemcellKey(name, version string) string { return name + "/" + version }

// InstanceState is an instance's desired state.
type InstanceState string

// Instance states.
const (
	InstanceStarted InstanceState = "started"
	InstanceStopped InstanceState = "stopped"
	// InstanceDetached is a hard stop: the VM is deleted, the instance kept.
	InstanceDetached InstanceState = "detached"
)

// Deployment is a deployed manifest.
type Deployment struct {
	Name     string `json:"name"`
	Manifest string `json:"manifest"`
}

// Instance is one member of an instance group.
type Instance struct {
	ID         string        `json:"id"` // a UUID; what provide's instance_id names
	Deployment string        `json:"deployment"`
	Group      string        `json:"group"`
	Index      int           `json:"index"`
	AZ         string        `json:"az,omitempty"`
	State      InstanceState `json:"state"`
	VMType     string        `json:"vm_type"`
	Stemcell   string        `json:"stemcell"` // stemcellKey
	Networks   []string      `json:"networks"`
	AgentID    string        `json:"agent_id,omitempty"`
	VMCID      string        `json:"vm_cid,omitempty"` // the active VM; "" when none
}

// VM is a VM the director created.
type VM struct {
	CID        string `json:"cid"`
	InstanceID string `json:"instance_id"`
	AgentID    string `json:"agent_id"`
	Deployment string `json:"deployment"`
	// StemcellAPIVersion is sent in the context of every CPI call about it.
	StemcellAPIVersion int `json:"stemcell_api_version"`
	// CPI names the CPI config the VM lives on; "" for the director's one
	// CPI (cpilab has no multi-CPI).
	CPI string `json:"cpi,omitempty"`
}

// DiskState is where a dynamic disk is in its life; anything but ready
// marks an operation that a crash interrupted (reconciled on restart).
type DiskState string

// Dynamic disk states.
const (
	DiskCreating  DiskState = "creating"  // create_disk in flight; no CID yet
	DiskReady     DiskState = "ready"     // at rest: attached (VMCID set) or not
	DiskAttaching DiskState = "attaching" // attach_disk in flight to VMCID
	DiskDetaching DiskState = "detaching" // detach_disk in flight from VMCID
	DiskDeleting  DiskState = "deleting"  // delete_disk in flight
)

// DynamicDisk is a disk managed through the dynamic_disks API. Name is
// unique (the store key).
type DynamicDisk struct {
	Name         string         `json:"name"`
	CID          string         `json:"disk_cid,omitempty"`
	Deployment   string         `json:"deployment"`
	DiskPoolName string         `json:"disk_pool_name"`
	SizeMiB      int            `json:"size"`
	Metadata     map[string]any `json:"metadata,omitempty"`
	AZ           string         `json:"availability_zone,omitempty"`
	CPI          string         `json:"cpi,omitempty"`
	State        DiskState      `json:"state"`
	// InstanceID and VMCID name the attachment; both "" when detached.
	InstanceID string          `json:"instance_id,omitempty"`
	VMCID      string          `json:"vm_cid,omitempty"`
	Hint       json.RawMessage `json:"disk_hint,omitempty"`
	// TaskID is the task that set a transient state.
	TaskID int64 `json:"task_id,omitempty"`
	// AttachInDoubt marks an attachment the record keeps without knowing
	// it: an attach_disk failed in doubt and the detach_disk that undoes
	// it failed in doubt too, so the cloud may or may not have the disk on
	// VMCID. The next detach settles it (DiskNotAttached is detached); a
	// provide or attach to VMCID calls attach_disk again to learn it.
	AttachInDoubt bool `json:"attach_in_doubt,omitempty"`
}

// Attached reports whether the record says the disk is attached.
func (d *DynamicDisk) Attached() bool { return d.VMCID != "" }

// OrphanedDisk is a disk the director no longer uses but has not deleted,
// as upstream's orphan_disks table: kept until cleaned up.
type OrphanedDisk struct {
	CID        string    `json:"disk_cid"`
	Name       string    `json:"name,omitempty"`
	Deployment string    `json:"deployment,omitempty"`
	SizeMiB    int       `json:"size,omitempty"`
	Reason     string    `json:"reason"`
	OrphanedAt time.Time `json:"orphaned_at"`
}

// LockRecord is a held lock as written to the store, for inspection.
type LockRecord struct {
	Name      string    `json:"name"`
	Owner     string    `json:"owner"`
	TaskID    int64     `json:"task_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

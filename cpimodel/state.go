package cpimodel

import (
	"encoding/json"
	"maps"
	"slices"
)

// State is the whole cloud as the contract sees it, keyed by CID.
type State struct {
	Stemcells map[string]Stemcell `json:"stemcells"`
	VMs       map[string]VM       `json:"vms"`
	Disks     map[string]Disk     `json:"disks"`
	Snapshots map[string]Snapshot `json:"snapshots"`
	// Registry holds the agent settings the registry has, by VM CID (nil
	// when the cloud has no registry the oracle can read).
	Registry map[string]Settings `json:"registry,omitempty"`
	// Unseen names what this view of the cloud cannot show (a Seen*
	// key), with why: a real cloud is seen through the CPI's own read
	// methods only. Nil for the whole cloud (an oracle's view).
	Unseen map[string]string `json:"unseen,omitempty"`
}

// What a view of the cloud may not show (State.Unseen keys).
const (
	SeenStemcells   = "stemcells"
	SeenVMs         = "vms"
	SeenDisks       = "disks"
	SeenAttachments = "attachments"
	SeenSnapshots   = "snapshots"
	// SeenDetails: metadata, cloud_properties, sizes, agent ids, tags,
	// networks, boots and devices.
	SeenDetails = "details"
)

// Sees reports whether the state shows what (a Seen* key).
func (s State) Sees(what string) bool { _, no := s.Unseen[what]; return !no }

// Stemcell is an uploaded stemcell.
type Stemcell struct {
	CID        string `json:"cid"`
	APIVersion int    `json:"api_version"`
	// CloudProperties are those create_stemcell was given, as the IaaS
	// recorded them.
	CloudProperties json.RawMessage   `json:"cloud_properties,omitempty"`
	Tags            map[string]string `json:"tags,omitempty"`
}

// VM is a virtual machine.
type VM struct {
	CID             string            `json:"cid"`
	AgentID         string            `json:"agent_id"`
	Stemcell        string            `json:"stemcell"`
	CloudProperties json.RawMessage   `json:"cloud_properties,omitempty"`
	Networks        json.RawMessage   `json:"networks,omitempty"`
	Env             json.RawMessage   `json:"env,omitempty"`
	UserData        json.RawMessage   `json:"user_data,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	// Size is how big the IaaS made the VM, in the IaaS's words.
	Size string `json:"size,omitempty"`
	// Boots is how many times the VM was booted.
	Boots int `json:"boots"`
	// Disks are the attached disks by CID.
	Disks map[string]Attachment `json:"disks"`
}

// Attachment is where an attached disk appears on its VM.
type Attachment struct {
	Device string `json:"device"`
	LUN    int    `json:"lun"`
}

// Disk is a persistent disk.
type Disk struct {
	CID             string            `json:"cid"`
	SizeMiB         int               `json:"size_mib"`
	CloudProperties json.RawMessage   `json:"cloud_properties,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	// AttachedTo is the VM CID the disk is attached to ("" when detached).
	AttachedTo string `json:"attached_to,omitempty"`
}

// Snapshot is a snapshot of a disk.
type Snapshot struct {
	CID  string `json:"cid"`
	Disk string `json:"disk"`
}

// Settings are a VM's agent settings as the registry holds them.
type Settings struct {
	Raw json.RawMessage `json:"raw"`
}

// Persistent returns the CIDs under disks.persistent, sorted, and whether
// the settings have that member at all.
func (s Settings) Persistent() ([]string, bool) {
	var v struct {
		Disks *struct {
			Persistent map[string]json.RawMessage `json:"persistent"`
		} `json:"disks"`
	}
	if json.Unmarshal(s.Raw, &v) != nil || v.Disks == nil || v.Disks.Persistent == nil {
		return nil, false
	}
	return slices.Sorted(maps.Keys(v.Disks.Persistent)), true
}

// Empty returns a state with nothing in it and a registry.
func Empty() State {
	return State{Stemcells: map[string]Stemcell{}, VMs: map[string]VM{}, Disks: map[string]Disk{},
		Snapshots: map[string]Snapshot{}, Registry: map[string]Settings{}}
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	out := State{Stemcells: map[string]Stemcell{}, VMs: map[string]VM{}, Disks: map[string]Disk{}, Snapshots: map[string]Snapshot{}}
	for k, v := range s.Stemcells {
		v.Tags = maps.Clone(v.Tags)
		out.Stemcells[k] = v
	}
	for k, v := range s.VMs {
		v.Metadata = maps.Clone(v.Metadata)
		v.Disks = maps.Clone(v.Disks)
		out.VMs[k] = v
	}
	for k, v := range s.Disks {
		v.Metadata = maps.Clone(v.Metadata)
		out.Disks[k] = v
	}
	maps.Copy(out.Snapshots, s.Snapshots)
	if s.Registry != nil {
		out.Registry = maps.Clone(s.Registry)
	}
	out.Unseen = maps.Clone(s.Unseen)
	return out
}

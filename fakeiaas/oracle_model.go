package fakeiaas

import (
	"fmt"

	"github.com/cpilab/cpilab/cpimodel"
)

// Model returns the state as the CPI contract's model sees it (package
// cpimodel): every stemcell, VM, disk, attachment, snapshot, tag, metadata
// and registry entry, without what the contract does not speak of
// (creation times, image paths, VM roots).
func (s State) Model() cpimodel.State {
	m := cpimodel.Empty()
	for _, x := range s.Stemcells {
		m.Stemcells[x.CID.String()] = cpimodel.Stemcell{CID: x.CID.String(), APIVersion: x.APIVersion,
			CloudProperties: x.CloudProperties, Tags: copyStrings(x.Tags)}
	}
	for _, x := range s.VMs {
		v := cpimodel.VM{CID: x.CID.String(), AgentID: x.AgentID, Stemcell: x.StemcellCID.String(),
			CloudProperties: x.CloudProperties, Networks: x.Networks, Env: x.Env, UserData: x.UserData,
			Metadata: copyStrings(x.Metadata), Boots: x.Boots, Disks: map[string]cpimodel.Attachment{},
			Size: fmt.Sprintf("%+v", x.Size)}
		for _, a := range x.Attachments {
			v.Disks[a.DiskCID.String()] = cpimodel.Attachment{Device: a.Device, LUN: a.LUN}
		}
		for _, d := range x.Disks {
			if _, ok := v.Disks[d.String()]; !ok {
				v.Disks[d.String()] = cpimodel.Attachment{}
			}
		}
		m.VMs[v.CID] = v
	}
	for _, x := range s.Disks {
		m.Disks[x.CID.String()] = cpimodel.Disk{CID: x.CID.String(), SizeMiB: x.SizeMiB, CloudProperties: x.CloudProperties,
			Metadata: copyStrings(x.Metadata), AttachedTo: x.VMCID.String()}
	}
	for _, x := range s.Snapshots {
		m.Snapshots[x.CID.String()] = cpimodel.Snapshot{CID: x.CID.String(), Disk: x.DiskCID.String()}
	}
	for k, v := range s.Registry {
		m.Registry[k] = cpimodel.Settings{Raw: v}
	}
	return m
}

func copyStrings[M ~map[string]string](in M) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

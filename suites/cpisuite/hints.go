package cpisuite

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// checkHintDevices attaches two disks to one VM in every hint style of the
// environment (each style on its own VM, all at once; only the default
// style unless everyStyle) and checks, against
// the oracle, that each disk's hint names the device the IaaS attached for
// that disk, not any device and not the other disk's.
func (st *state) checkHintDevices(ctx SpecContext, stemcell string, sv int, everyStyle bool) {
	GinkgoHelper()
	styles := st.cfg.Env.HintStyles
	if len(styles) == 0 || !everyStyle {
		styles = map[string]cpiv2.CloudProps{"default": {}}
	}
	names := slices.Sorted(maps.Keys(styles))
	t := st.tracker()
	parallel(len(names), func(i int) {
		style := names[i]
		v := st.createVMWith(ctx, t, stemcell, sv, mergeProps(st.cfg.Env.VMCloudProperties, styles[style]))
		disks := []string{
			st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, v.CID),
			st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, v.CID),
		}
		for _, d := range disks {
			h, x := st.attach(ctx, t, v.CID, d)
			if st.client.APIVersion < 2 {
				h = st.registryHint(ctx, v.CID, d, x)
			}
			od, ok, err := st.cfg.Oracle.Disk(ctx, d)
			if err != nil || !ok {
				Fail(fmt.Sprintf("oracle disk %s: ok=%v err=%v", d, ok, err))
			}
			if od.AttachedTo != v.CID {
				violate(violation(ClauseHintDevice, fmt.Sprintf("attach_disk of %s to %s succeeded, but the IaaS shows it attached to %q", d, v.CID, od.AttachedTo), x))
			}
			checked, wrong := hintNames(h, od, d)
			if wrong != "" {
				hb, _ := json.Marshal(h)
				violate(violation(ClauseHintDevice, fmt.Sprintf("hint style %s: the hint %s for disk %s does not name the device the IaaS attached it as (%s, LUN %d on %s): %s",
					style, hb, d, od.Device, od.LUN, v.CID, wrong), x))
			}
			if !checked {
				hb, _ := json.Marshal(h)
				AddReportEntry("hint not checked", fmt.Sprintf("hint style %s: %s names no path, id, volume_id or lun cpilab can compare", style, hb), ReportEntryVisibilityNever)
			}
		}
	})
}

// registryHint returns the hint an api_version 1 attach_disk wrote into the
// registry settings of vmCID (disks.persistent), as a v1 agent reads it (or
// into the settings file in the VM, for a CPI that writes one).
func (st *state) registryHint(ctx SpecContext, vmCID, disk string, x *Exchange) cpiv2.DiskHint {
	GinkgoHelper()
	s, err := st.cfg.Oracle.Settings(ctx, vmCID)
	if err != nil {
		Fail(fmt.Sprintf("oracle settings: %v", err))
	}
	where, settings := "the registry settings", s.Registry
	if s.InVM != "" { // a CPI that writes the settings into the VM
		where, settings = s.InVM, s.File
	}
	if settings == nil {
		notChecked("at api_version 1 the hint travels in the registry, and this setup has no registry settings for the VM")
	}
	var set struct {
		Disks struct {
			Persistent map[string]json.RawMessage `json:"persistent"`
		} `json:"disks"`
	}
	_ = json.Unmarshal(settings, &set)
	raw, ok := set.Disks.Persistent[disk]
	if !ok {
		violate(violation(ClauseAgentDisk, fmt.Sprintf("at api_version 1 attach_disk must record disk %s in %s (disks.persistent), they are %s", disk, where, excerpt(settings)), x))
	}
	var h cpiv2.DiskHint
	if err := h.UnmarshalJSON(raw); err != nil {
		violate(violation(ClauseAttachHint, fmt.Sprintf("the registry hint of disk %s is invalid: %v", disk, err), x))
	}
	return h
}

// hintNames compares hint h with the IaaS attachment od of disk diskCID:
// checked reports whether h holds anything comparable (path, id, volume_id,
// lun), wrong says what names another device ("" when all agree).
//
// A path names the device when it is /dev/<device> (the bind directory
// od.Path for a directory disk), the same letter under
// another of the sd/xvd/vd prefixes (the agent maps between them), or a
// by-id link of the disk. An id names the disk when it is the disk CID or
// its first 20 characters (a virtio serial). volume_id (in a hash hint) and
// lun are the SCSI target/LUN; a volume_id may also be the disk CID.
func hintNames(h cpiv2.DiskHint, od OracleDisk, diskCID string) (checked bool, wrong string) {
	var why []string
	lun := strconv.Itoa(od.LUN)
	if h.Path != "" && od.Path != "" {
		// A directory disk: the hint's path is where it is bound.
		checked = true
		if h.Path != od.Path {
			why = append(why, fmt.Sprintf("path %q is not %s, where the IaaS bound the disk", h.Path, od.Path))
		}
	} else if h.Path != "" {
		checked = true
		if !pathNames(h.Path, od.Device, diskCID) {
			why = append(why, fmt.Sprintf("path %q is not /dev/%s", h.Path, od.Device))
		}
	}
	if !h.IsString() {
		if h.ID != "" {
			checked = true
			if !idNames(h.ID, diskCID) {
				why = append(why, fmt.Sprintf("id %q is not the disk's", h.ID))
			}
		}
		if h.VolumeID != "" {
			checked = true
			if h.VolumeID != diskCID && (od.LUN < 0 || h.VolumeID != lun) {
				why = append(why, fmt.Sprintf("volume_id %q is neither the disk CID nor its SCSI target %s", h.VolumeID, lun))
			}
		}
		if h.LUN != "" {
			checked = true
			if od.LUN < 0 || h.LUN != lun {
				why = append(why, fmt.Sprintf("lun %q is not the disk's LUN %s", h.LUN, lun))
			}
		}
	}
	return checked, strings.Join(why, "; ")
}

func pathNames(p, device, diskCID string) bool {
	if device == "" {
		return false
	}
	if p == "/dev/"+device {
		return true
	}
	if rest, ok := strings.CutPrefix(p, "/dev/disk/by-id/"); ok {
		return idNames(rest, diskCID) || strings.Contains(rest, diskCID[:min(20, len(diskCID))])
	}
	name, ok := strings.CutPrefix(p, "/dev/")
	if !ok {
		return false
	}
	return deviceLetters(name) != "" && deviceLetters(name) == deviceLetters(device)
}

// deviceLetters returns the letters after a sd/xvd/vd/hd prefix ("" when
// the name has none of them).
func deviceLetters(name string) string {
	for _, p := range []string{"xvd", "sd", "vd", "hd"} {
		if l, ok := strings.CutPrefix(name, p); ok && l != "" && strings.Trim(l, "abcdefghijklmnopqrstuvwxyz") == "" {
			return l
		}
	}
	return ""
}

func idNames(id, diskCID string) bool {
	return id == diskCID || (len(id) >= 20 && strings.HasPrefix(diskCID, id))
}

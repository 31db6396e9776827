package agent

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
)

// DiskSettings is what the agent knows about one disk, built from its CID
// and the CPI's hint (upstream settings.PersistentDiskSettingsFromHint). The
// JSON keys are upstream's, as persistent_disk_hints.json stores them.
type DiskSettings struct {
	// ID is the disk CID.
	ID string `json:"ID"`
	// DeviceID is the hint's "id".
	DeviceID string `json:"DeviceID,omitempty"`
	// VolumeID is the hint's "volume_id" (a string hint sets it too).
	VolumeID string `json:"VolumeID,omitempty"`
	// Lun is the hint's "lun".
	Lun string `json:"Lun,omitempty"`
	// HostDeviceID is the hint's "host_device_id".
	HostDeviceID string `json:"HostDeviceID,omitempty"`
	// Path is the hint's "path" (a string hint sets it too).
	Path string `json:"Path,omitempty"`
	// ISCSISettings is the hint's "iscsi_settings".
	ISCSISettings *cpiv2.ISCSISettings `json:"ISCSISettings,omitempty"`
}

// DiskSettingsFromHint maps a hint to disk settings as upstream does: a
// string hint sets Path and VolumeID; hash keys map one to one; ID is the CID.
func DiskSettingsFromHint(diskCID string, h cpiv2.DiskHint) DiskSettings {
	return DiskSettings{
		ID:            diskCID,
		DeviceID:      h.ID,
		VolumeID:      h.VolumeID,
		Lun:           h.LUN,
		HostDeviceID:  h.HostDeviceID,
		Path:          h.Path,
		ISCSISettings: h.ISCSI,
	}
}

// DecodeDiskSettings decodes a wire hint (string or hash of strings) for
// diskCID and checks both are safe to use inside a VM root. It never panics:
// a hash value that is not a string is an error wrapping cpiv2.ErrBadDiskHint,
// an unsafe CID or path one wrapping ErrUnsafe.
func DecodeDiskSettings(diskCID string, rawHint json.RawMessage) (DiskSettings, error) {
	if err := CheckName("disk CID", diskCID); err != nil {
		return DiskSettings{}, err
	}
	ds, err := decodeHint(diskCID, rawHint)
	if err != nil {
		return DiskSettings{}, err
	}
	if err := ds.check(); err != nil {
		return DiskSettings{}, err
	}
	return ds, nil
}

// check validates every field a resolver may turn into a path or pattern.
func (d DiskSettings) check() error {
	if err := CheckName("disk CID", d.ID); err != nil {
		return err
	}
	fields := []struct{ name, v string }{
		{"hint id", d.DeviceID}, {"hint lun", d.Lun}, {"hint host_device_id", d.HostDeviceID},
	}
	// A string hint ("/dev/sdc" or "3") is both path and volume_id: it must
	// be a clean guest path or a SCSI target token. A hash's path must be a
	// guest path and its volume_id a token.
	switch {
	case d.Path != "" && d.VolumeID == d.Path:
		if err := CheckGuestPath("hint path", d.Path); err != nil {
			if checkGlobToken("hint", d.Path) != nil {
				return err
			}
		}
	default:
		if d.Path != "" {
			if err := CheckGuestPath("hint path", d.Path); err != nil {
				return err
			}
		}
		fields = append(fields, struct{ name, v string }{"hint volume_id", d.VolumeID})
	}
	for _, f := range fields {
		if f.v == "" {
			continue
		}
		if err := checkGlobToken(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// decodeDiskSettingsLax decodes as DecodeDiskSettings does but checks only
// what bosh-agent checks (Knobs.LaxNames): a CID that is not empty, a hint
// that says something.
func decodeDiskSettingsLax(diskCID string, rawHint json.RawMessage) (DiskSettings, error) {
	if err := checkLaxName("disk CID", diskCID); err != nil {
		return DiskSettings{}, err
	}
	return decodeHint(diskCID, rawHint)
}

// decodeHint decodes a wire hint that says something, for diskCID; the
// caller checks the names it may use.
func decodeHint(diskCID string, rawHint json.RawMessage) (DiskSettings, error) {
	var h cpiv2.DiskHint
	if err := json.Unmarshal(rawHint, &h); err != nil {
		if !errors.Is(err, cpiv2.ErrBadDiskHint) {
			err = fmt.Errorf("%w: %v", cpiv2.ErrBadDiskHint, err)
		}
		return DiskSettings{}, fmt.Errorf("agent: hint for disk %s: %w", diskCID, err)
	}
	if h.IsZero() {
		return DiskSettings{}, fmt.Errorf("agent: hint for disk %s: %w: it says nothing", diskCID, cpiv2.ErrBadDiskHint)
	}
	return DiskSettingsFromHint(diskCID, h), nil
}

// checkSettings is DiskSettings.check unless Knobs.LaxNames.
func (a *Agent) checkSettings(d DiskSettings) error {
	if a.cfg.Knobs.LaxNames {
		return checkLaxName("disk CID", d.ID)
	}
	return d.check()
}

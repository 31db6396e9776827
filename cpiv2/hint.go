package cpiv2

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// DiskHint tells the agent how to find an attached disk. It
// has two wire forms: a string, meaning path = volume_id = that string, and a
// hash whose values are all JSON strings (iscsi_settings is a hash of strings).
type DiskHint struct {
	Path         string         `json:"path,omitempty"`
	VolumeID     string         `json:"volume_id,omitempty"`
	ID           string         `json:"id,omitempty"`
	LUN          string         `json:"lun,omitempty"`
	HostDeviceID string         `json:"host_device_id,omitempty"`
	ISCSI        *ISCSISettings `json:"iscsi_settings,omitempty"`

	// fromString records that the hint arrived in (or is to be sent in) the
	// string form; Path and VolumeID then hold that string.
	fromString bool
}

// ISCSISettings is the iscsi_settings member of a hash hint.
type ISCSISettings struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	InitiatorName string `json:"initiator_name,omitempty"`
	Target        string `json:"target,omitempty"`
}

// StringHint returns the string form of a hint.
func StringHint(s string) DiskHint { return DiskHint{Path: s, VolumeID: s, fromString: true} }

// IsString reports whether the hint uses the string form.
func (h DiskHint) IsString() bool { return h.fromString }

// IsZero reports whether the hint says nothing: the Director's "No disk_hint".
func (h DiskHint) IsZero() bool {
	return h.Path == "" && h.VolumeID == "" && h.ID == "" && h.LUN == "" && h.HostDeviceID == "" && h.ISCSI == nil
}

// ErrBadDiskHint is wrapped by every hint decoding error.
var ErrBadDiskHint = errors.New("invalid disk hint")

// MarshalJSON writes the string form for a string hint, else the hash form.
func (h DiskHint) MarshalJSON() ([]byte, error) {
	if h.fromString {
		return json.Marshal(h.Path)
	}
	type plain DiskHint
	return json.Marshal(plain(h))
}

// UnmarshalJSON accepts a JSON string or an object of string values. Unknown
// keys are kept out (the agent ignores them) but must still be strings; any
// non-string value is an error naming the key, never a panic downstream.
func (h *DiskHint) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrBadDiskHint)
	}
	switch data[0] {
	case '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("%w: %v", ErrBadDiskHint, err)
		}
		*h = StringHint(s)
		return nil
	case '{':
	default:
		return fmt.Errorf("%w: must be a string or a hash, got %s", ErrBadDiskHint, excerpt(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("%w: %v", ErrBadDiskHint, err)
	}
	var out DiskHint
	for _, k := range sortedKeys(raw) {
		v := raw[k]
		if k == "iscsi_settings" {
			s, err := decodeISCSI(v)
			if err != nil {
				return err
			}
			out.ISCSI = s
			continue
		}
		s, err := hintString(k, v)
		if err != nil {
			return err
		}
		switch k {
		case "path":
			out.Path = s
		case "volume_id":
			out.VolumeID = s
		case "id":
			out.ID = s
		case "lun":
			out.LUN = s
		case "host_device_id":
			out.HostDeviceID = s
		}
	}
	*h = out
	return nil
}

func decodeISCSI(v json.RawMessage) (*ISCSISettings, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("%w: iscsi_settings must be a hash of strings, got %s", ErrBadDiskHint, excerpt(v))
	}
	var s ISCSISettings
	for _, k := range sortedKeys(raw) {
		str, err := hintString("iscsi_settings."+k, raw[k])
		if err != nil {
			return nil, err
		}
		switch k {
		case "username":
			s.Username = str
		case "password":
			s.Password = str
		case "initiator_name":
			s.InitiatorName = str
		case "target":
			s.Target = str
		}
	}
	return &s, nil
}

func hintString(key string, v json.RawMessage) (string, error) {
	var s string
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", fmt.Errorf("%w: value of %q must be a JSON string, got %s", ErrBadDiskHint, key, excerpt(v))
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package flexvolume

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Status is a call-out's "status" field. kubelet knows exactly these three
// values; anything else ("Failed", "success") is a failure to it.
type Status string

// The statuses kubelet's driver-call.go knows.
const (
	StatusSuccess      Status = "Success"
	StatusFailure      Status = "Failure"
	StatusNotSupported Status = "Not supported"
)

// Call-out names, as kubelet and the attach/detach controller pass them as
// argv[1].
const (
	CmdInit          = "init"
	CmdGetVolumeName = "getvolumename"
	CmdAttach        = "attach"
	CmdWaitForAttach = "waitforattach"
	CmdIsAttached    = "isattached"
	CmdDetach        = "detach"
	CmdMountDevice   = "mountdevice"
	CmdUnmountDevice = "unmountdevice"
	CmdMount         = "mount"
	CmdUnmount       = "unmount"
	CmdExpandVolume  = "expandvolume"
	CmdExpandFS      = "expandfs"
)

// Option keys kubelet adds to the JSON options (pkg/volume/flexvolume
// util.go); the docs' spellings of some of them differ.
const (
	OptionFSType      = "kubernetes.io/fsType"
	OptionReadWrite   = "kubernetes.io/readwrite"
	OptionPVOrVolName = "kubernetes.io/pvOrVolumeName"
	OptionFSGroup     = "kubernetes.io/mounterArgs.FsGroup"
	OptionPodName     = "kubernetes.io/pod.name"
	OptionPodNS       = "kubernetes.io/pod.namespace"
	OptionPodUID      = "kubernetes.io/pod.uid"
	OptionSecretPre   = "kubernetes.io/secret/"
)

// Capabilities is init's "capabilities" object. Omitted fields take
// kubelet's defaults (attach, selinuxRelabel, fsGroup, requiresFSResize
// true; supportsMetrics false): use DefaultCapabilities before decoding.
type Capabilities struct {
	Attach           bool `json:"attach"`
	SELinuxRelabel   bool `json:"selinuxRelabel"`
	SupportsMetrics  bool `json:"supportsMetrics"`
	FSGroup          bool `json:"fsGroup"`
	RequiresFSResize bool `json:"requiresFSResize"`
}

// DefaultCapabilities are kubelet's defaults for omitted capabilities.
func DefaultCapabilities() Capabilities {
	return Capabilities{Attach: true, SELinuxRelabel: true, FSGroup: true, RequiresFSResize: true}
}

// KnownCapabilities are the capability keys kubelet reads.
var KnownCapabilities = []string{"attach", "selinuxRelabel", "supportsMetrics", "fsGroup", "requiresFSResize"}

// Result is one call-out's answer: the single JSON object a driver prints.
type Result struct {
	Status       Status        `json:"status"`
	Message      string        `json:"message,omitempty"`
	Device       string        `json:"device,omitempty"`
	VolumeName   string        `json:"volumeName,omitempty"`
	Attached     *bool         `json:"attached,omitempty"`
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// VolumeNewSize is expandvolume's new size in bytes (0: not reported).
	VolumeNewSize int64 `json:"volumeNewSize,omitempty"`
}

// Protocol errors a caller finds in a driver's answer. Each is its own
// value, usable with errors.Is.
var (
	// ErrNotOneJSONObject: the combined stdout+stderr is not exactly one
	// JSON object (extra log lines, two objects, nothing at all).
	ErrNotOneJSONObject = errors.New("flexvolume: output is not exactly one JSON object")
	// ErrUnknownStatus: "status" is none of Success, Failure, Not supported.
	ErrUnknownStatus = errors.New("flexvolume: status is not Success, Failure or Not supported")
	// ErrSuccessNonZeroExit: a Success answer with a non-zero exit status
	// (kubelet: "driver bug: exec error … but no error in response").
	ErrSuccessNonZeroExit = errors.New("flexvolume: Success with a non-zero exit status")
	// ErrFailureZeroExit: a Failure answer with exit status 0.
	ErrFailureZeroExit = errors.New("flexvolume: Failure with exit status 0")
	// ErrFailureNoMessage: a Failure answer without a message.
	ErrFailureNoMessage = errors.New("flexvolume: Failure without a message")
	// ErrTimeout: the call-out ran past its time-out and was killed.
	ErrTimeout = errors.New("flexvolume: call-out timed out")
	// ErrMissingField: a Success answer lacks the field its call-out must
	// give (attach/waitforattach: device; isattached: attached).
	ErrMissingField = errors.New("flexvolume: Success without its call-out's field")
)

// ParseOutput decodes a driver's combined output as kubelet does: the
// whole of it must be one JSON object (surrounding white space allowed).
func ParseOutput(out []byte) (Result, error) {
	var r Result
	dec := json.NewDecoder(bytes.NewReader(out))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return r, fmt.Errorf("%w: %v; output %q", ErrNotOneJSONObject, err, clip(out))
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return r, fmt.Errorf("%w: output %q is not an object", ErrNotOneJSONObject, clip(out))
	}
	if dec.More() || len(bytes.TrimSpace(out[dec.InputOffset():])) > 0 {
		return r, fmt.Errorf("%w: text after the object; output %q", ErrNotOneJSONObject, clip(out))
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("%w: %v; output %q", ErrNotOneJSONObject, err, clip(out))
	}
	switch r.Status {
	case StatusSuccess, StatusFailure, StatusNotSupported:
	default:
		return r, fmt.Errorf("%w: %q", ErrUnknownStatus, r.Status)
	}
	return r, nil
}

// CheckExit checks a parsed answer against the process's exit status:
// Success exits 0, Failure exits non-zero with a message. "Not supported"
// may exit 0 (kubelet's code) or 1 (the doc): kubelet caches it either way.
func CheckExit(r Result, exitCode int) error {
	switch {
	case r.Status == StatusSuccess && exitCode != 0:
		return fmt.Errorf("%w: exit status %d", ErrSuccessNonZeroExit, exitCode)
	case r.Status == StatusFailure && exitCode == 0:
		return fmt.Errorf("%w (message %q)", ErrFailureZeroExit, r.Message)
	case r.Status == StatusFailure && r.Message == "":
		return ErrFailureNoMessage
	}
	return nil
}

func clip(b []byte) []byte {
	if len(b) > 512 {
		return append(append([]byte(nil), b[:512]...), "…"...)
	}
	return b
}

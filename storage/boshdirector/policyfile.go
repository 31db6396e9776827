package boshdirector

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cpilab/cpilab/storage"
)

// ErrBadPolicyFile is wrapped by every LoadVolumes and ParseVolumes error.
var ErrBadPolicyFile = errors.New("invalid storage policy file")

// A policy file lists the volumes the controller sizes, each with its
// policy (the RFC's field names; sizes in MiB, durations as Go durations,
// absent fields take storage's defaults):
//
//	volumes:
//	- id: pg-main/data            # logical identity: status and budget key
//	  diskName: pg-data           # the dynamic disk at the Director
//	  instanceId: 5b0c…           # where it is provided
//	  diskPool: small             # its disk pool (cloud config disk type)
//	  policy:
//	    request: 10240
//	    limit: 204800
//	    targetBuffer: 20
//	    maintenanceWindow: {schedule: "0 3 * * *", duration: 2h, timeZone: Europe/Paris}
//	    emergencyGrow: {criticalThreshold: 95, criticalMinimumFree: 1024, exceedLimitOnEmergency: false,
//	                    maxActionsPerDay: 4, reservedActionsForEmergency: 1}
//	    cooldown: 1h
//	    hysteresis: 20
//	    minDelta: 5
//	    minStep: 2048
//	    maxStep: 512000
//	    shrinkDelay: 24h
//	    allowShrink: false
type policyFile struct {
	Volumes []volumeYAML `yaml:"volumes"`
}

type volumeYAML struct {
	ID         string     `yaml:"id"`
	DiskName   string     `yaml:"diskName"`
	InstanceID string     `yaml:"instanceId"`
	DiskPool   string     `yaml:"diskPool"`
	Policy     policyYAML `yaml:"policy"`
}

type policyYAML struct {
	Request      int64 `yaml:"request"`
	Limit        int64 `yaml:"limit"`
	TargetBuffer int   `yaml:"targetBuffer"`
	Window       struct {
		Schedule string `yaml:"schedule"`
		Duration string `yaml:"duration"`
		TimeZone string `yaml:"timeZone"`
	} `yaml:"maintenanceWindow"`
	Emergency struct {
		Disabled                    bool  `yaml:"disabled"`
		CriticalThreshold           int   `yaml:"criticalThreshold"`
		CriticalMinimumFree         int64 `yaml:"criticalMinimumFree"`
		ExceedLimitOnEmergency      bool  `yaml:"exceedLimitOnEmergency"`
		MaxActionsPerDay            int   `yaml:"maxActionsPerDay"`
		ReservedActionsForEmergency int   `yaml:"reservedActionsForEmergency"`
	} `yaml:"emergencyGrow"`
	Cooldown    string `yaml:"cooldown"`
	Hysteresis  int    `yaml:"hysteresis"`
	MinDelta    int    `yaml:"minDelta"`
	MinStep     int64  `yaml:"minStep"`
	MaxStep     int64  `yaml:"maxStep"`
	ShrinkDelay string `yaml:"shrinkDelay"`
	AllowShrink bool   `yaml:"allowShrink"`
}

// LoadVolumes reads and validates a policy file.
func LoadVolumes(path string) ([]storage.Volume, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPolicyFile, err)
	}
	return ParseVolumes(path, b)
}

// ParseVolumes parses a policy file's text (name is used in errors). Every
// volume needs id, diskName, instanceId and diskPool; ids and disk names are
// unique; unknown keys are refused; each policy passes Policy.Validate. An
// error names the file, the volume and the field.
func ParseVolumes(name string, text []byte) ([]storage.Volume, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadPolicyFile, name, fmt.Sprintf(format, a...))
	}
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	var f policyFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, bad("%v", err)
	}
	if len(f.Volumes) == 0 {
		return nil, bad("no volumes (want a top-level `volumes:` list)")
	}
	ids, disks := map[string]bool{}, map[string]bool{}
	out := make([]storage.Volume, 0, len(f.Volumes))
	for i, v := range f.Volumes {
		where := fmt.Sprintf("volumes[%d]", i)
		if v.ID != "" {
			where = fmt.Sprintf("volumes[%d] (%s)", i, v.ID)
		}
		for _, req := range [][2]string{{"id", v.ID}, {"diskName", v.DiskName}, {"instanceId", v.InstanceID}, {"diskPool", v.DiskPool}} {
			if req[1] == "" {
				return nil, bad("%s: %s is required", where, req[0])
			}
		}
		if ids[v.ID] {
			return nil, bad("%s: id %q appears twice", where, v.ID)
		}
		if disks[v.DiskName] {
			return nil, bad("%s: diskName %q is sized by two volumes", where, v.DiskName)
		}
		ids[v.ID], disks[v.DiskName] = true, true
		p, err := v.Policy.policy()
		if err != nil {
			return nil, bad("%s: policy.%v", where, err)
		}
		if err := p.Validate(); err != nil {
			return nil, bad("%s: policy: %v", where, err)
		}
		out = append(out, storage.Volume{ID: v.ID, DiskName: v.DiskName, InstanceID: v.InstanceID, DiskPool: v.DiskPool, Policy: p})
	}
	return out, nil
}

func (y policyYAML) policy() (storage.Policy, error) {
	p := storage.Policy{RequestMiB: y.Request, LimitMiB: y.Limit, TargetBuffer: y.TargetBuffer, Hysteresis: y.Hysteresis,
		MinDelta: y.MinDelta, MinStepMiB: y.MinStep, MaxStepMiB: y.MaxStep, AllowShrink: y.AllowShrink}
	p.Window.Schedule, p.Window.TimeZone = y.Window.Schedule, y.Window.TimeZone
	e := y.Emergency
	p.Emergency = storage.Emergency{Disabled: e.Disabled, CriticalThreshold: e.CriticalThreshold, CriticalMinimumFreeMiB: e.CriticalMinimumFree,
		ExceedLimit: e.ExceedLimitOnEmergency, MaxActionsPerDay: e.MaxActionsPerDay, ReservedForEmergency: e.ReservedActionsForEmergency}
	for _, d := range []struct {
		field string
		text  string
		dst   *time.Duration
	}{{"maintenanceWindow.duration", y.Window.Duration, &p.Window.Duration}, {"cooldown", y.Cooldown, &p.Cooldown},
		{"shrinkDelay", y.ShrinkDelay, &p.ShrinkDelay}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil {
			return p, fmt.Errorf("%s: %q is not a duration (e.g. 90m, 2h)", d.field, d.text)
		}
		*d.dst = v
	}
	return p, nil
}

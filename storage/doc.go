// Package storage is a convergent storage-sizing controller for BOSH dynamic
// disks. It keeps each logical volume between a request (floor) and a limit
// (ceiling), converging toward a target buffer of free space. Non-urgent
// growth and shrink happen only inside a maintenance window; emergency
// growth happens at once when free space is critical; a sliding 24-hour
// action budget keeps a reserve for emergencies; policy lives in the spec
// and is never rewritten, state lives in the status.
//
// The model is the RFC "Convergent Dynamic Storage Management" (CloudNativePG,
// fork jmealo/cloudnative-pg, docs/src/design/dynamic-storage-meta-rfc.md).
// Where that fork's implementation diverges from its RFC (a budget counter
// reset instead of a sliding window, no cooldown, no hysteresis), Profile has
// a knob reproducing the divergence, so the simulator can show what it costs.
//
// The package is deterministic: the caller passes the time in every call.
// Decide is a pure function of the policy, the status and one observation:
//
//	p := storage.Policy{RequestMiB: 10240, LimitMiB: 102400, TargetBuffer: 20}
//	if err := p.Validate(); err != nil { … }
//	d := storage.Decide(p, status, storage.Observation{SizeMiB: 10240, UsedMiB: 9900, At: now}, storage.Reference)
//	// d.Kind == storage.EmergencyGrow, d.TargetMiB == …
//
// Sizes are MiB, as the Director's disk_size.
package storage

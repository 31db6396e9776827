package storage

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Policy (the RFC's).
const (
	DefaultTargetBuffer           = 20 // % free
	DefaultCriticalThreshold      = 95 // % used
	DefaultCriticalMinimumFreeMiB = 1024
	DefaultMaxActionsPerDay       = 4
	DefaultReservedForEmergency   = 1
	DefaultCooldown               = time.Hour
	DefaultHysteresis             = 20 // percentage points above TargetBuffer before a shrink
	DefaultMinDelta               = 5  // % change below which no action is taken
	DefaultShrinkDelay            = 24 * time.Hour
	DefaultMinStepMiB             = 2048
	DefaultMaxStepMiB             = 500 * 1024
	DefaultWindowSchedule         = "0 3 * * *"
	DefaultWindowDuration         = 2 * time.Hour
	DefaultTimeZone               = "UTC"

	// MaxSizeMiB bounds every size a policy may name (64 TiB).
	MaxSizeMiB = 64 << 20
)

// Policy is the user's intent for one logical volume. The controller reads it
// and never writes it. Zero fields take the defaults above; Validate fills
// them in and refuses contradictions.
type Policy struct {
	// RequestMiB is the floor: the volume is never smaller (required, ≥ 1).
	RequestMiB int64
	// LimitMiB is the ceiling (required, ≥ RequestMiB, ≤ MaxSizeMiB).
	LimitMiB int64
	// TargetBuffer is the free space to converge toward, in % of the size
	// (5–50; default 20).
	TargetBuffer int
	// Window is when non-urgent grow and shrink may start.
	Window Window
	// Emergency is growth outside the window when free space is critical.
	Emergency Emergency
	// Cooldown is the least time between two non-emergency actions on the
	// volume (default 1 h; a negative value means none).
	Cooldown time.Duration
	// Hysteresis: shrink only when free space exceeds TargetBuffer by this
	// many percentage points (default 20).
	Hysteresis int
	// MinDelta: no action when the target differs from the size by less than
	// this % of the size (default 5).
	MinDelta int
	// MinStepMiB and MaxStepMiB clamp every growth step (defaults 2 GiB and
	// 500 GiB).
	MinStepMiB, MaxStepMiB int64
	// ShrinkDelay is the least time from a growth to a shrink (default
	// 24 h): a growth step may overshoot, and taking it back at once is a flap.
	ShrinkDelay time.Duration
	// AllowShrink enables scheduled shrink (create + copy + swap). Off by
	// default: growth is automatic, shrink intentional.
	AllowShrink bool
}

// Emergency configures growth outside the maintenance window.
type Emergency struct {
	// Disabled turns emergency growth off (it is on by default).
	Disabled bool
	// CriticalThreshold is the % used at or above which growth is urgent
	// (80–99; default 95).
	CriticalThreshold int
	// CriticalMinimumFreeMiB: free space at or below this is urgent too
	// (default 1 GiB).
	CriticalMinimumFreeMiB int64
	// ExceedLimit lets emergency growth go past LimitMiB (up to MaxSizeMiB
	// and the provider's maximum).
	ExceedLimit bool
	// MaxActionsPerDay bounds all actions on the volume in any sliding 24 h
	// (default 4; 0 after Validate only if set explicitly negative: none).
	MaxActionsPerDay int
	// ReservedForEmergency of those are kept for emergencies (default 1).
	ReservedForEmergency int
}

// ErrInvalidPolicy is wrapped by every Validate error.
var ErrInvalidPolicy = errors.New("invalid storage policy")

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidPolicy, fmt.Sprintf(format, a...))
}

// Validate fills in defaults and checks p, naming the field at fault.
func (p *Policy) Validate() error {
	if p.RequestMiB < 1 {
		return invalidf("request must be at least 1 MiB, got %d", p.RequestMiB)
	}
	if p.LimitMiB < p.RequestMiB {
		return invalidf("limit (%d MiB) is below request (%d MiB)", p.LimitMiB, p.RequestMiB)
	}
	if p.LimitMiB > MaxSizeMiB {
		return invalidf("limit %d MiB exceeds the maximum %d MiB", p.LimitMiB, MaxSizeMiB)
	}
	if p.TargetBuffer == 0 {
		p.TargetBuffer = DefaultTargetBuffer
	}
	if p.TargetBuffer < 5 || p.TargetBuffer > 50 {
		return invalidf("targetBuffer must be 5–50 %%, got %d", p.TargetBuffer)
	}
	if err := p.Window.validate(); err != nil {
		return err
	}
	e := &p.Emergency
	if e.CriticalThreshold == 0 {
		e.CriticalThreshold = DefaultCriticalThreshold
	}
	if e.CriticalThreshold < 80 || e.CriticalThreshold > 99 {
		return invalidf("emergencyGrow.criticalThreshold must be 80–99 %%, got %d", e.CriticalThreshold)
	}
	if e.CriticalMinimumFreeMiB == 0 {
		e.CriticalMinimumFreeMiB = DefaultCriticalMinimumFreeMiB
	}
	if e.CriticalMinimumFreeMiB < 0 {
		return invalidf("emergencyGrow.criticalMinimumFree must not be negative, got %d", e.CriticalMinimumFreeMiB)
	}
	if e.MaxActionsPerDay == 0 {
		e.MaxActionsPerDay = DefaultMaxActionsPerDay
		if e.ReservedForEmergency == 0 {
			e.ReservedForEmergency = DefaultReservedForEmergency
		}
	}
	if e.MaxActionsPerDay < 1 || e.MaxActionsPerDay > 100 {
		return invalidf("emergencyGrow.maxActionsPerDay must be 1–100, got %d", e.MaxActionsPerDay)
	}
	if e.ReservedForEmergency < 0 || e.ReservedForEmergency > e.MaxActionsPerDay {
		return invalidf("emergencyGrow.reservedActionsForEmergency must be 0–%d (maxActionsPerDay), got %d", e.MaxActionsPerDay, e.ReservedForEmergency)
	}
	if p.Cooldown == 0 {
		p.Cooldown = DefaultCooldown
	}
	if p.Cooldown < 0 {
		p.Cooldown = 0
	}
	if p.Hysteresis == 0 {
		p.Hysteresis = DefaultHysteresis
	}
	if p.Hysteresis < 0 || p.TargetBuffer+p.Hysteresis >= 100 {
		return invalidf("hysteresis must be 0–%d points, got %d", 99-p.TargetBuffer, p.Hysteresis)
	}
	if p.MinDelta == 0 {
		p.MinDelta = DefaultMinDelta
	}
	if p.MinDelta < 0 || p.MinDelta > 50 {
		return invalidf("minDelta must be 0–50 %%, got %d", p.MinDelta)
	}
	if p.ShrinkDelay == 0 {
		p.ShrinkDelay = DefaultShrinkDelay
	}
	if p.ShrinkDelay < 0 {
		p.ShrinkDelay = 0
	}
	if p.MinStepMiB == 0 {
		p.MinStepMiB = DefaultMinStepMiB
	}
	if p.MaxStepMiB == 0 {
		p.MaxStepMiB = DefaultMaxStepMiB
	}
	if p.MinStepMiB < 1 || p.MaxStepMiB < p.MinStepMiB || p.MaxStepMiB > MaxSizeMiB {
		return invalidf("steps must satisfy 1 ≤ minStep (%d) ≤ maxStep (%d) ≤ %d MiB", p.MinStepMiB, p.MaxStepMiB, MaxSizeMiB)
	}
	return nil
}

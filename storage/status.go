package storage

import "time"

// Kind is what a decision asks for.
type Kind string

// Decision kinds.
const (
	None            Kind = "None"
	EmergencyGrow   Kind = "EmergencyGrow"   // now, outside the window, may use the reserve
	FloorGrow       Kind = "FloorGrow"       // the volume is below request (a raised request): now
	ScheduledGrow   Kind = "ScheduledGrow"   // inside the window, planned budget
	ScheduledShrink Kind = "ScheduledShrink" // inside the window, planned budget, create + copy + swap
)

// Urgent reports whether k may act outside the window and use the reserve.
func (k Kind) Urgent() bool { return k == EmergencyGrow || k == FloorGrow }

// State is the volume's state as the status reports it.
type State string

// States.
const (
	StateBalanced             State = "Balanced"
	StateNeedsGrow            State = "NeedsGrow"
	StateNeedsShrink          State = "NeedsShrink"
	StatePendingGrowth        State = "PendingGrowth" // a grow waits for a gate (window, cooldown, budget, provider)
	StatePendingShrink        State = "PendingShrink"
	StateEmergency            State = "Emergency"
	StateResizing             State = "Resizing"
	StateAtLimit              State = "AtLimit"
	StateWaitingForDiskStatus State = "WaitingForDiskStatus"
)

// Gate names a reason an action did not happen. Every block is surfaced as a
// condition, so no stall is silent.
type Gate string

// Gates.
const (
	GateWindow   Gate = "MaintenanceWindowClosed"
	GateCooldown Gate = "Cooldown"
	GateBudget   Gate = "BudgetExhausted"
	GateLimit    Gate = "LimitReached"
	GateProvider Gate = "ProviderRefused"
	GateInFlight Gate = "ModificationInFlight"
	GateNoStatus Gate = "NoDiskStatus"
	GateMinDelta Gate = "BelowMinimumDelta"
)

// Condition is one block or fact the status reports.
type Condition struct {
	Gate    Gate
	Message string
	// Until is when the block ends, when known (window, cooldown, budget).
	Until time.Time
}

// Action is one resize the controller issued.
type Action struct {
	Kind           Kind
	FromMiB, ToMiB int64
	At             time.Time
	Result         Result
	Message        string
}

// CountsAgainstBudget: every issued action counts except one the provider
// refused at once.
func (a Action) CountsAgainstBudget() bool { return a.Result != Refused }

// Result of an action.
type Result string

// Results.
const (
	Issued    Result = "Issued"    // sent; the outcome is not known yet
	Succeeded Result = "Succeeded" // the volume has the new size
	Failed    Result = "Failed"    // the Director's task failed
	Refused   Result = "Refused"   // the provider refused at once (quota, maximum): no budget used
)

// Status is the controller's state for one logical volume, keyed by the
// volume's logical identity (not by disk CID: it survives disk replacement).
// It is everything the controller needs to resume after a restart.
type Status struct {
	// EffectiveSizeMiB is the size the volume has (the last one observed or
	// made); new replicas are made at this size.
	EffectiveSizeMiB int64
	// TargetSizeMiB is the size the last decision converges toward.
	TargetSizeMiB int64
	State         State
	LastAction    *Action
	// History holds the actions of the last 24 h and more (pruned to 48 h):
	// the sliding-window budget is counted from it.
	History    []Action
	Conditions []Condition
	// NextWindow is when the maintenance window next opens (PendingGrowth).
	NextWindow time.Time

	// PendingTask is the Director task of the action in flight ("" when
	// none).
	PendingTask string

	// Counter and CounterAt model the fork's budget (Profile.BudgetReset).
	Counter   int
	CounterAt time.Time

	// lastCopy is the copy of an action setLastAction made for LastAction.
	lastCopy *Action
}

// Observation is what the controller knows about the volume at one moment.
type Observation struct {
	At time.Time
	// Known is false when no usage report came (agent down, disk absent).
	Known bool
	// SizeMiB is the provisioned size the cloud reports; UsedMiB the used
	// space the agent reports.
	SizeMiB, UsedMiB int64
	// InFlight: a modification of this disk is still in progress.
	InFlight bool
	// ProviderBlockedUntil: the provider refuses modifications until then
	// (a rolling quota or a minimum interval).
	ProviderBlockedUntil time.Time
	// ProviderMaxMiB is the provider's largest disk (0: no maximum known).
	ProviderMaxMiB int64
}

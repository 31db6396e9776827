package fakeiaas

import (
	"context"
	"encoding/json"
	"sort"
)

// State returns the whole state at one instant (the oracle). Lists are
// sorted by CID; VMs carry their attachments.
func (c *Cloud) State(ctx context.Context) (State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := State{
		Stemcells: make([]Stemcell, 0, len(c.stemcells)), VMs: make([]VM, 0, len(c.vms)),
		Disks: make([]Disk, 0, len(c.disks)), Snapshots: make([]Snapshot, 0, len(c.snapshots)),
		Registry: make(map[string]json.RawMessage, len(c.registry)),
	}
	for _, x := range c.stemcells {
		s.Stemcells = append(s.Stemcells, *x)
	}
	for _, x := range c.vms {
		s.VMs = append(s.VMs, c.viewVMLocked(x))
	}
	for _, x := range c.disks {
		d := *x
		d.Metadata = copyMeta(x.Metadata)
		s.Disks = append(s.Disks, d)
	}
	for _, x := range c.snapshots {
		s.Snapshots = append(s.Snapshots, *x)
	}
	for k, v := range c.registry {
		s.Registry[k] = append(json.RawMessage(nil), v...)
	}
	sort.Slice(s.Stemcells, func(i, j int) bool { return s.Stemcells[i].CID.String() < s.Stemcells[j].CID.String() })
	sort.Slice(s.VMs, func(i, j int) bool { return s.VMs[i].CID.String() < s.VMs[j].CID.String() })
	sort.Slice(s.Disks, func(i, j int) bool { return s.Disks[i].CID.String() < s.Disks[j].CID.String() })
	sort.Slice(s.Snapshots, func(i, j int) bool { return s.Snapshots[i].CID.String() < s.Snapshots[j].CID.String() })
	return s, nil
}

// History returns the recorded operations matching f, oldest first; limit
// 0 means all.
func (c *Cloud) History(ctx context.Context, f HistoryFilter, limit int) ([]HistoryEntry, error) {
	// Access records are queued without waiting (see read); flush them so
	// the history is complete up to now.
	c.mu.Lock()
	t := c.st.enqueue(batch{})
	c.mu.Unlock()
	if err := t.wait(); err != nil {
		return nil, internalErr("history", err)
	}
	h, err := c.st.history(f, limit)
	if err != nil {
		return nil, internalErr("history", err)
	}
	if h == nil {
		h = []HistoryEntry{}
	}
	return h, nil
}

// AddFault adds a fault rule and returns it with its ID.
func (c *Cloud) AddFault(ctx context.Context, r Rule) (Rule, error) {
	out, err := c.faults.add(r)
	if err != nil {
		if e, ok := err.(*Error); ok {
			return Rule{}, e // a limit: keeps its code
		}
		return Rule{}, invalid("%v", err)
	}
	return out, nil
}

// Faults lists the active fault rules with their counters.
func (c *Cloud) Faults(ctx context.Context) ([]RuleStatus, error) { return c.faults.list(), nil }

// RemoveFault removes a rule (releasing calls it paused); ErrNotFound when
// there is no such rule.
func (c *Cloud) RemoveFault(ctx context.Context, id string) error {
	if !c.faults.remove(id) {
		return newErr(CodeNotFound, "Bosh::Clouds::CloudError", "no fault rule %q", id)
	}
	return nil
}

// ReleaseFault releases the calls a pause rule holds; later matching calls
// are no longer paused. ErrNotFound when there is no such rule.
func (c *Cloud) ReleaseFault(ctx context.Context, id string) error {
	if !c.faults.release(id) {
		return newErr(CodeNotFound, "Bosh::Clouds::CloudError", "no fault rule %q", id)
	}
	return nil
}

// ClearFaults removes every rule, releasing paused calls.
func (c *Cloud) ClearFaults(ctx context.Context) error {
	c.faults.clear()
	return nil
}

package boshdirector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/storage"
)

// Agents runs one agent method (*mbus.Client does).
type Agents interface {
	Run(agentID, method string, args ...any) (json.RawMessage, error)
}

// Usage is storage.UsageSource over the agents' dynamic_disk_usage (a
// cpilab agent extension): the instance's agent ID is looked up through the
// Director (GET /deployments, GET /deployments/:d/instances), then its agent
// reports the disk's size and allocated bytes.
type Usage struct {
	api    API
	agents Agents
}

var _ storage.UsageSource = (*Usage)(nil)

// NewUsage returns the adapter.
func NewUsage(api API, agents Agents) *Usage { return &Usage{api: api, agents: agents} }

// Errors of Usage, for errors.Is.
var (
	// ErrNoAgent: the instance is unknown or has no VM.
	ErrNoAgent = errors.New("no agent for the instance")
	// ErrNotLinked: the agent does not link the disk (or cannot read it).
	ErrNotLinked = errors.New("the agent reports no usage for the disk")
)

// Usage returns the disk's size and used space, in MiB (used rounded up).
func (u *Usage) Usage(ctx context.Context, instanceID, diskCID string) (int64, int64, error) {
	agentID, err := u.agentOf(ctx, instanceID)
	if err != nil {
		return 0, 0, err
	}
	raw, err := u.agents.Run(agentID, agent.MethodDynamicDiskUsage)
	if err != nil {
		return 0, 0, fmt.Errorf("agent %s %s: %w", agentID, agent.MethodDynamicDiskUsage, err)
	}
	var all []agent.DiskUsage
	if err := json.Unmarshal(raw, &all); err != nil {
		return 0, 0, fmt.Errorf("agent %s %s: decoding %s: %w", agentID, agent.MethodDynamicDiskUsage, raw, err)
	}
	for _, du := range all {
		if du.DiskCID != diskCID {
			continue
		}
		if du.Error != "" {
			return 0, 0, fmt.Errorf("disk %s on agent %s: %s: %w", diskCID, agentID, du.Error, ErrNotLinked)
		}
		const mib = 1 << 20
		return du.TotalBytes / mib, (du.UsedBytes + mib - 1) / mib, nil
	}
	return 0, 0, fmt.Errorf("disk %s on agent %s: %w", diskCID, agentID, ErrNotLinked)
}

func (u *Usage) agentOf(ctx context.Context, instanceID string) (string, error) {
	if instanceID == "" {
		return "", fmt.Errorf("disk is detached: %w", ErrNoAgent)
	}
	var deps []struct {
		Name string `json:"name"`
	}
	if err := u.api.GetJSON(ctx, "/deployments", &deps); err != nil {
		return "", err
	}
	for _, dep := range deps {
		insts, err := u.api.Instances(ctx, dep.Name)
		if err != nil {
			return "", err
		}
		for _, in := range insts {
			if in.ID == instanceID {
				if in.AgentID == "" {
					return "", fmt.Errorf("instance %s has no VM: %w", instanceID, ErrNoAgent)
				}
				return in.AgentID, nil
			}
		}
	}
	return "", fmt.Errorf("instance %s not found: %w", instanceID, ErrNoAgent)
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/cpilab/cpilab/realagent"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// --agent: which agent resolves the CPI's disk hints on the embedded cloud.
const (
	agentReference = "reference"
	agentReal      = "real"
	// realAgentRows selects the matrix rows (their labels are row:<name>),
	// where the agent resolves each CPI's hint: --agent real runs those
	// unless --label-filter says otherwise.
	realAgentRows = "/^row:/"
)

func (f *certifyFlags) checkAgent(fs *flag.FlagSet) error {
	switch f.agent {
	case agentReference:
		return nil
	case agentReal:
	default:
		return usageError(fs, "--agent %q: want reference or real", f.agent)
	}
	if f.config != "" || (f.cloud != "" && f.cloud != cloudFakeiaas) {
		return usageError(fs, "--agent real runs the upstream agent beside the embedded fakeiaas cloud; it does not go with --config or --cloud %s", f.cloud)
	}
	return nil
}

// startRealAgent starts the upstream agent's box, or says why it cannot:
// the note for the run either way.
func startRealAgent(log io.Writer) (*realagent.Box, string) {
	box, err := realagent.Start(realagent.Options{Log: func(format string, args ...any) {
		fmt.Fprintf(log, format+"\n", args...)
	}})
	if err != nil {
		return nil, fmt.Sprintf("--agent real: the upstream agent cannot run here, so every agent step is not checked: %v", err)
	}
	return box, "--agent real: the upstream BOSH agent in a container (identity and virtio resolvers) decides each dynamic disk link of the matrix rows; rows whose agent uses another resolver are not checked there"
}

// notHostedAgents answers every agent step "not hosted": --agent real
// without a box.
type notHostedAgents struct{ why string }

func (n notHostedAgents) Ping(context.Context, string) error {
	return fmt.Errorf("%s: %w", n.why, cpisuite.ErrNotHosted)
}

func (n notHostedAgents) Run(context.Context, string, string, ...any) (json.RawMessage, error) {
	return nil, fmt.Errorf("%s: %w", n.why, cpisuite.ErrNotHosted)
}

package suites

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Sequence is a shrunk random lifecycle that broke the contract's model
// (the explore row), as every report shows it: its steps in order, what
// the last one broke, the replay file it was written to and the command
// that runs it alone.
type Sequence struct {
	// Seed is the seed of the lifecycle that was shrunk (0: a replay
	// file written by hand).
	Seed uint64 `json:"seed"`
	// Steps are the shrunk lifecycle's calls, in order; the last broke
	// the model.
	Steps []SequenceStep `json:"steps"`
	// Broke is what the last step broke (a model violation), or why the
	// lifecycle could not run.
	Broke string `json:"broke"`
	// ReplayFile is the replay file the steps were written to ("" when it
	// could not be written).
	ReplayFile string `json:"replay_file"`
	// Replay is the command that runs the replay file alone (certify
	// --replay FILE with the flags that shaped the run).
	Replay string `json:"replay,omitempty"`
	// Unshrunk is set when the lifecycle is reported as found, up to the
	// step that broke the model, without shrinking (certify --no-shrink).
	Unshrunk bool `json:"unshrunk,omitempty"`
}

// SequenceStep is one step of a shrunk lifecycle.
type SequenceStep struct {
	// N counts from 1.
	N int `json:"n"`
	// Profile is the caller profile whose api_version the call carried;
	// Method and Arguments the call, its objects named by reference
	// ("$vm:1": the CID the first create_vm returned).
	Profile   string            `json:"profile"`
	Method    string            `json:"method"`
	Arguments []json.RawMessage `json:"arguments"`
	// Concurrent is the call run at the same time, on other objects, in
	// the same form as Call ("" when none).
	Concurrent string `json:"concurrent,omitempty"`
	// Call is the step in one line: "profile method(arguments)".
	Call string `json:"call"`
	// Response is what the CPI answered (cut to a few hundred bytes; ""
	// when the step did not run).
	Response string `json:"response"`
}

// EntryExploreSequence is the report entry of a shrunk failing lifecycle
// (a Sequence without its replay command, which the report adds).
const EntryExploreSequence = "explore_sequence"

// writeText writes the sequence for a terminal or a JUnit body, each line
// after the first indented by indent.
func (s *Sequence) writeText(w io.Writer, indent string) {
	kind := "shrunk sequence"
	if s.Unshrunk {
		kind = "sequence as found, unshrunk"
	}
	fmt.Fprintf(w, "%s%s (%d %s):\n", indent, kind, len(s.Steps), Plural(len(s.Steps), "step", "steps"))
	for _, st := range s.Steps {
		call := st.Call
		if st.Concurrent != "" {
			call += " ‖ " + st.Concurrent
		}
		fmt.Fprintf(w, "%s  %d. %s\n", indent, st.N, call)
		if st.Response != "" {
			fmt.Fprintf(w, "%s       → %s\n", indent, st.Response)
		}
	}
	fmt.Fprintf(w, "%s  broke: %s\n", indent, s.Broke)
	switch {
	case s.Replay != "":
		fmt.Fprintf(w, "%sreplay it alone: %s\n", indent, s.Replay)
	case s.ReplayFile != "":
		fmt.Fprintf(w, "%sreplay file: %s\n", indent, s.ReplayFile)
	}
}

// Text is the sequence as a terminal shows it, each line after the first
// indented by indent.
func (s *Sequence) Text(indent string) string {
	var b strings.Builder
	s.writeText(&b, indent)
	return b.String()
}

// Plural is one when n is 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cpilab/cpilab/adversarial"
)

func init() {
	commands["adversarial"] = command{summary: "the seeded adversarial campaign: hostile inputs at every boundary, tallied by crash, data lost, leak and escape", run: runAdversarial}
	helps["adversarial"] = helpText{
		usage: []string{"adversarial [--seed N] [--scale short|test|full] [--areas A,B,…] [--json-report FILE]"},
		about: `Throws hostile inputs at every boundary docs/security.md names: the Director's HTTP API, fakeiaas's
HTTP API (with restarts between creates), SFTP onto a VM root, the agent, the CPI process runner,
what cpilab reads from and prints about its peers (endless answers, duplicate keys, secrets, terminal
escapes, forged reports) and cpilab's own command line. Each input is judged by oracles outside the system: crash (a panic, a 5xx, a
hang past its bound, a wrong exit status), data lost (an acknowledged disk, VM or disk's bytes gone or
changed), leak (a process, goroutine, descriptor, file or IaaS disk left behind), escape (a file changed
outside the VM root or temporary directory under attack), and, for inputs that must be refused, whether
the refusal was clear. Prints the tally per area; the same seed and scale rerun the same inputs.`,
		examples: []string{
			"cpilab adversarial                                # the full campaign (≥ 750 inputs)",
			"cpilab adversarial --scale short --areas cpi-runner,sftp",
			"cpilab adversarial --seed 42 --json-report adversarial.json",
		},
		exit: "0 no crash, data lost, leak or escape · 1 a finding · 2 usage or harness error, or interrupted",
	}
}

func runAdversarial(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("adversarial", stderr)
	var seed int64
	fs.Int64Var(&seed, "seed", 1, "root seed; every area draws from a stream derived from it")
	scale := fs.String("scale", string(adversarial.ScaleFull), "how many inputs: short, test or full (≥ 750)")
	areas := fs.String("areas", "", "comma-separated areas to run (default all: "+strings.Join(adversarial.Areas, ",")+")")
	jsonReport := fs.String("json-report", "", "also write the report as JSON to `FILE`")
	fixtures := fs.String("fixtures", "", "cpilab's fixtures `DIR` (default: fixtures/ of the source tree around the working directory, else the copy built into cpilab)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if seed == 0 {
		return usageErrorf(fs, "--seed must not be 0")
	}
	cfg := adversarial.Config{Seed: seed, Scale: adversarial.Scale(*scale), FixturesDir: *fixtures, CLI: runNested}
	if *areas != "" {
		cfg.Areas = strings.Split(*areas, ",")
	}
	if !commonOf(fs).quiet {
		cfg.Progress = stderr
	}
	rep, err := adversarial.Run(ctx, cfg)
	if errors.Is(err, adversarial.ErrUnknownArea) || errors.Is(err, adversarial.ErrUnknownScale) {
		return usageErrorf(fs, "%v", err)
	}
	if err != nil {
		return err
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if *jsonReport != "" {
		f, err := os.Create(*jsonReport)
		if err != nil {
			return err
		}
		if err := errors.Join(rep.WriteJSON(f), f.Close()); err != nil {
			return fmt.Errorf("--json-report: %w", err)
		}
	}
	if !rep.Clean() {
		return exitError(exitRejected)
	}
	return nil
}

// runNested is the command line the campaign's cli area attacks: run,
// in process. The campaign itself is not attacked from inside itself.
func runNested(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "adversarial" {
		return exitUsage
	}
	return run(ctx, args, stdout, stderr)
}

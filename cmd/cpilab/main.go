// Command cpilab is the conformance and simulation harness for BOSH Cloud
// Provider Interfaces and the Director's dynamic-disk orchestration.
//
//	cpilab certify            certify the reference CPI on the embedded fake cloud
//	cpilab certify --cpi PATH certify any CPI executable
//	cpilab fakeiaas           run the fake cloud
//	cpilab director           run the reference Director
//	cpilab agent --root DIR   run one reference agent
//	cpilab certify-director   certify a director's dynamic disks API
//	cpilab certify-flex       certify a FlexVolume driver (the BOSH dynamic disks driver by default)
//	cpilab certify-csi        certify a CSI driver (bosh-csi by default): csi-sanity, then BOSH checks
//	cpilab simulate / replay  deterministic lifecycle simulation
//	cpilab completion bash    shell completion
//	cpilab storage run|simulate|replay  convergent storage sizing over dynamic disks
//
// Each subcommand lives in its own file and registers itself in commands; it
// only maps flags to the documented config struct of the package it runs.
// Every command follows one convention (cli.go, docs/cli.md): help on
// stdout, --version, exit status 0 accepted / 1 rejected / 2 usage or
// harness error, NO_COLOR and --no-color, --quiet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cpilab/cpilab/internal/termsafe"
	"github.com/cpilab/cpilab/simulator"
)

// command is one subcommand.
type command struct {
	summary string
	// run parses args with its own FlagSet and runs; it returns an
	// exitError to choose the status; any other error is a harness error
	// (exit status 2).
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is filled by each subcommand file's init.
var commands = map[string]command{}

// The exit statuses every command uses (docs/cli.md).
const (
	exitAccepted = 0 // the command did what was asked; certify: the CPI is accepted
	exitRejected = 1 // certify, certify-director, simulate, replay: something failed a check
	exitUsage    = 2 // a usage error, a harness error, or an interrupted run
)

// exitError carries an exit status without an extra message (the command
// has already said what went wrong).
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	simulator.Program = invokedAs() // its replay lines run as printed
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		if len(args) > 1 && args[0] == "help" {
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		writeUsage(stdout)
		return exitAccepted
	case "--version", "-version", "version":
		writeVersion(stdout)
		return exitAccepted
	case "completion":
		return runCompletion(ctx, args[1:], stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "cpilab: unknown command %q\n", args[0])
		names := []string{"completion", "help", "version"}
		for n := range commands {
			names = append(names, n)
		}
		if s := closest(strings.TrimLeft(args[0], "-"), names); s != "" {
			fmt.Fprintf(stderr, "Did you mean 'cpilab %s'?\n", s)
		}
		fmt.Fprintf(stderr, "Run 'cpilab --help' for the list of commands.\n")
		return exitUsage
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	var code exitError
	switch {
	case err == nil:
		return exitAccepted
	case errors.Is(err, flag.ErrHelp):
		writeHelp(stdout, args[0])
		return exitAccepted
	case errors.Is(err, errVersionShown):
		writeVersion(stdout)
		return exitAccepted
	case errors.As(err, &code):
		return int(code)
	default:
		fmt.Fprintf(stderr, "cpilab %s: %s\n", args[0], termsafe.String(err.Error()))
		return exitUsage
	}
}

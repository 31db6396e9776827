// Command cpilab is the conformance and simulation harness for BOSH Cloud
// Provider Interfaces and the Director's dynamic-disk orchestration.
//
//	cpilab certify            certify the reference CPI on the embedded fake cloud
//	cpilab certify --cpi PATH certify any CPI executable
//	cpilab fakeiaas           run the fake cloud
//	cpilab director           run the reference Director
//	cpilab agent --root DIR   run one reference agent
//	cpilab certify-director   certify a director's dynamic disks API
//	cpilab simulate / replay  deterministic lifecycle simulation
//	cpilab storage run|simulate|replay  convergent storage sizing over dynamic disks
//
// Each subcommand lives in its own file and registers itself in commands; it
// only maps flags to the documented config struct of the package it runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	// run parses args with its own FlagSet and runs; it returns an
	// exitError to choose the status, any other error exits 1.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is filled by each subcommand file's init.
var commands = map[string]command{}

// exitError carries an exit status without an extra message (the command
// has already said what went wrong).
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "cpilab: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	var code exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &code):
		return int(code)
	default:
		fmt.Fprintf(stderr, "cpilab %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: cpilab <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'cpilab <command> -h' for a command's flags.")
}

// newFlagSet returns a FlagSet that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cpilab "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args with fs and refuses positional arguments. A bad
// flag or argument is a usage error: exit status 2, said once (the FlagSet
// has already printed the error and the usage). -h returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitError(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return exitError(2)
	}
	return nil
}

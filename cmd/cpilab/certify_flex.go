package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/certifier"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/flex"
)

func init() {
	commands["certify-flex"] = command{summary: "certify a Kubernetes FlexVolume driver (the project's BOSH dynamic disks driver by default) against an embedded director, agents and fake cloud", run: runCertifyFlex}
}

type certifyFlexFlags struct {
	common         certifier.Flags
	driver, plugin string
	backend        string
	callTimeout    time.Duration
	lenientExit    bool
}

func runCertifyFlex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certify-flex", stderr)
	var f certifyFlexFlags
	fs.StringVar(&f.driver, "driver", "", "the FlexVolume driver executable (default: bosh-flexvolume next to cpilab or on PATH)")
	fs.StringVar(&f.plugin, "plugin-name", "", "its plugin directory name, vendor~driver (default: its directory's name when it has a ~, else cpilab~<executable name>)")
	fs.StringVar(&f.backend, "backend", flex.BackendBOSH, "bosh: the driver stores volumes as the director's dynamic disks (cloud and fault checks made); none: it does not")
	fs.DurationVar(&f.callTimeout, "call-timeout", 60*time.Second, "time-out of each call-out (the driver is killed after it)")
	fs.BoolVar(&f.lenientExit, "lenient-exit", false, "accept Failure with exit status 0, as kubelet does (default: Failure must exit non-zero, as the FlexVolume doc says)")
	f.common.Register(fs, map[string]string{"label-filter": "run only the specs matching this Ginkgo label filter `EXPR` (e.g. area:attach)",
		"v": "verbose Ginkgo output, with every call-out and its output, on stderr"})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.backend != flex.BackendBOSH && f.backend != flex.BackendNone {
		return usageError(fs, "--backend must be %s or %s, not %q", flex.BackendBOSH, flex.BackendNone, f.backend)
	}
	return runCertifier(ctx, fs, &f.common, certifier.Certifier{Name: "certify-flex", TargetKind: "FlexVolume driver",
		Areas: flex.Areas, ClauseTitles: flex.ClauseTitles,
		List: func(opts suites.RunOptions) ([]suites.SpecInfo, error) {
			return suites.ListTree(flex.Description, func() { flex.Register(&flex.RunConfig{}) }, opts)
		},
		Run: func(ctx context.Context, opts suites.RunOptions, o certifier.Output) (*certifier.Result, error) {
			return f.run(ctx, opts, o, fs)
		}}, stdout, stderr)
}

// run is certify-flex's certifier.Certifier Run: the FlexVolume suite
// against the driver on an embedded director, agents and fake cloud.
func (f certifyFlexFlags) run(ctx context.Context, opts suites.RunOptions, o certifier.Output, fs *flag.FlagSet) (*certifier.Result, error) {
	driver, own, err := findFlexDriver(f.driver)
	if err != nil {
		return nil, err
	}
	plugin := f.plugin
	if plugin == "" && own {
		plugin = "cpilab~bosh-disk"
	}
	rc := flex.RunConfig{Config: flex.Config{Driver: driver, PluginName: plugin, Backend: f.backend, CallTimeout: f.callTimeout,
		LenientExit: f.lenientExit}, EnvOut: o.Out}
	if o.Quiet {
		rc.EnvOut = io.Discard
	} else {
		fmt.Fprintf(o.Out, "certifying FlexVolume driver %s (backend %s)\n", driver, f.backend)
	}
	report, err := flex.Run(ctx, rc, opts)
	if err != nil {
		return nil, err
	}
	return &certifier.Result{Report: report, Target: driver, Notes: []string{"FlexVolume driver certification, backend " + f.backend},
		Rerun: flexRerunCommand(f, invokedAs(), driver, fs)}, nil
}

// flexRerunCommand returns the command line that reruns one spec, runnable
// as printed from any directory: the cpilab the user ran (argv0), the
// driver's absolute path, and every flag that changes what a spec does.
func flexRerunCommand(f certifyFlexFlags, argv0, driver string, fs *flag.FlagSet) func(focus string) string {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return func(focus string) string {
		parts := []string{shellWord(argv0), "certify-flex"}
		if f.driver != "" {
			parts = append(parts, "--driver", shellWord(driver))
		}
		if f.plugin != "" {
			parts = append(parts, "--plugin-name", shellWord(f.plugin))
		}
		if f.backend != flex.BackendBOSH {
			parts = append(parts, "--backend", f.backend)
		}
		if f.lenientExit {
			parts = append(parts, "--lenient-exit")
		}
		if set["call-timeout"] {
			parts = append(parts, "--call-timeout", f.callTimeout.String())
		}
		if f.common.Strict {
			parts = append(parts, "--strict")
		}
		return strings.Join(append(parts, "--focus", shellWord(focus)), " ")
	}
}

// findFlexDriver returns the driver to certify and whether it is the
// project's own.
func findFlexDriver(flagPath string) (string, bool, error) {
	if flagPath != "" {
		p, err := filepath.Abs(flagPath)
		if err != nil {
			return "", false, err
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", false, fmt.Errorf("--driver %s: not an executable file", flagPath)
		}
		return p, false, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "bosh-flexvolume")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, true, nil
		}
	}
	if p, err := exec.LookPath("bosh-flexvolume"); err == nil {
		abs, err := filepath.Abs(p)
		return abs, true, err
	}
	return "", false, errors.New("no FlexVolume driver to certify: bosh-flexvolume is neither next to cpilab nor on PATH (run `make build`, or give --driver PATH)")
}

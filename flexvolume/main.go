package flexvolume

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
)

// MainConfig adapts Main (the catalog of buggy drivers wraps the driver
// through it); the zero value is the driver as shipped.
type MainConfig struct {
	// WrapDeps may replace the driver's collaborators once built.
	WrapDeps func(cfg Config, d *Deps)
	// Rewrite may change the answer, the exit status and the output before
	// they are written (nil: as the driver answered).
	Rewrite func(args []string, r Result, exit int, out io.Writer) (Result, int)
	// Override, when it answers ok, replaces the driver's own call-out.
	Override func(ctx context.Context, d *Driver, args []string) (r Result, ok bool)
}

// Main runs one call-out of the driver installed at os.Args[0] and exits:
// exactly one JSON object on stdout, nothing on stderr, logs to the
// config's log file.
func Main(mc MainConfig) {
	// The path the driver was run as (kubelet runs it by its absolute
	// path), not the file /proc/self/exe names: a hard-linked copy reads
	// the config beside its own link.
	exe := os.Args[0]
	if !filepath.IsAbs(exe) {
		if p, err := os.Executable(); err == nil && filepath.Base(p) == filepath.Base(exe) {
			exe = p
		} else {
			exe, _ = filepath.Abs(exe)
		}
	}
	r, code := run(exe, os.Args[1:], mc)
	if mc.Rewrite != nil {
		r, code = mc.Rewrite(os.Args[1:], r, code, os.Stdout)
	}
	Write(os.Stdout, r)
	os.Exit(code)
}

func run(exe string, args []string, mc MainConfig) (Result, int) {
	// mount-utils logs with klog: into the log file only, never stderr.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	path := ConfigPath(exe)
	if len(args) > 0 && args[0] == CmdInit {
		// init needs no config: kubelet and the controller-manager probe
		// every installed driver, configured or not. A config that loads
		// says whether the Director resizes (requiresFSResize).
		cfg, _ := LoadConfig(path)
		return initResult(cfg), 0
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		r := failure("%v", err)
		return r, ExitCode(r)
	}
	logf, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	var logw io.Writer = io.Discard
	if err == nil {
		defer logf.Close()
		logw = logf
		klog.SetOutput(logf)
	}
	deps := Deps{Log: logw}
	if mc.WrapDeps != nil {
		d0, err := NewDriver(cfg, DriverName(exe), deps)
		if err != nil {
			r := failure("%v", err)
			return r, ExitCode(r)
		}
		deps = d0.deps
		mc.WrapDeps(cfg, &deps)
	}
	d, err := NewDriver(cfg, DriverName(exe), deps)
	if err != nil {
		r := failure("%v", err)
		return r, ExitCode(r)
	}
	ctx := context.Background()
	if mc.Override != nil {
		if r, ok := mc.Override(ctx, d, args); ok {
			return r, ExitCode(r)
		}
	}
	r := d.Run(ctx, args)
	klog.Flush()
	return r, ExitCode(r)
}

// String shows a result for logs.
func (r Result) String() string { return fmt.Sprintf("%s %q", r.Status, r.Message) }

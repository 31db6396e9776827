package csi

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

// Main runs bosh-csi with args (os.Args[1:]) until SIGTERM or SIGINT;
// bugs is zero in bosh-csi (the catalog of buggy drivers sets one). It
// returns the exit status.
func Main(args []string, stderr io.Writer, bugs Bugs) int {
	fs := flag.NewFlagSet("bosh-csi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", ModeAll, "services to serve: controller, node or all")
	endpoint := fs.String("endpoint", "unix:///csi/csi.sock", "the CSI endpoint, unix:///path")
	config := fs.String("config", "/var/vcap/jobs/bosh-csi/config/config.json", "the config file (JSON, docs/csi.md)")
	logFile := fs.String("log-file", "", "append the driver's log to this file (default: stderr)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := LoadConfig(*config, *mode)
	if err != nil {
		fmt.Fprintf(stderr, "bosh-csi: %v\n", err)
		return 2
	}
	logw := stderr
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "bosh-csi: --log-file: %v\n", err)
			return 2
		}
		defer f.Close()
		logw = f
	}
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	_ = kfs.Set("logtostderr", "false")
	klog.SetOutput(logw)
	d, err := NewDriver(cfg, Deps{Log: logw, Bugs: bugs})
	if err != nil {
		fmt.Fprintf(stderr, "bosh-csi: %v\n", err)
		return 2
	}
	s, err := Listen(d, *mode, *endpoint)
	if err != nil {
		fmt.Fprintf(stderr, "bosh-csi: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { // I/O edge: a signal stops the server
		<-ctx.Done()
		s.Stop()
	}()
	fmt.Fprintf(logw, "bosh-csi %s: serving %s on %s\n", Version, *mode, *endpoint)
	if err := s.Serve(); err != nil {
		fmt.Fprintf(stderr, "bosh-csi: %v\n", err)
		return 1
	}
	return 0
}

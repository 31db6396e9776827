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

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/certifier"
	"github.com/cpilab/cpilab/fixtures/csidrivers"
	"github.com/cpilab/cpilab/internal/termsafe"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/csisuite"
	"github.com/cpilab/cpilab/suites/flex"
)

func init() {
	commands["certify-csi"] = command{summary: "certify a CSI driver (the project's bosh-csi by default): csi-sanity, then BOSH checks against an embedded director, agents and fake cloud", run: runCertifyCSI}
}

type certifyCSIFlags struct {
	common                                            certifier.Flags
	endpoint, nodeEndpoint, nodeRoot, driver, backend string
	catalog, params, world, serveWorld                string
}

func runCertifyCSI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certify-csi", stderr)
	var f certifyCSIFlags
	fs.StringVar(&f.endpoint, "endpoint", "", "certify the already running driver at this controller endpoint, unix:///path (csi-sanity only: --backend none)")
	fs.StringVar(&f.nodeEndpoint, "node-endpoint", "", "with --endpoint: the node plugin's endpoint (default: the same)")
	fs.StringVar(&f.nodeRoot, "node-root", "", "with --endpoint: the node plugin's filesystem root as seen from here (a cpilab VM root), inside which csi-sanity makes its staging and target paths (default: paths on this host)")
	fs.StringVar(&f.params, "params", "", "with --endpoint: CreateVolume parameters for csi-sanity, k=v,k=v (e.g. diskPool=dynamic)")
	fs.StringVar(&f.world, "world", "", "with --endpoint and --backend bosh: the world file of the embedded world the running driver was started on (written by --serve-world); --node-endpoint then lists one endpoint per node, comma-separated")
	fs.StringVar(&f.serveWorld, "serve-world", "", "start the embedded director, agents and fake cloud, write their world `FILE` (what a driver needs: the director, the disk-scoped client, the nodes' instances and roots) and serve until interrupted, for a driver certified by --endpoint --world")
	fs.StringVar(&f.driver, "driver", "", "a CSI driver executable taking bosh-csi's flags (--mode, --endpoint, --config, --log-file), started on the embedded world (default: bosh-csi next to cpilab or on PATH, else the one built into cpilab)")
	fs.StringVar(&f.catalog, "catalog-driver", "", "certify a driver of the project's catalog of buggy and legal CSI drivers, by name (what the certifier is tested against)")
	fs.StringVar(&f.backend, "backend", "", "bosh: the driver stores volumes as the director's dynamic disks (BOSH checks made; default without --endpoint, or with --world); none: csi-sanity only (default with --endpoint)")
	f.common.Register(fs, map[string]string{"label-filter": "run only the specs matching this Ginkgo label filter `EXPR` (e.g. area:attach)"})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.check(fs); err != nil {
		return err
	}
	if f.serveWorld != "" {
		return serveCSIWorld(ctx, f.serveWorld, stdout)
	}
	rc := csisuite.RunConfig{Backend: f.backend, Endpoint: f.endpoint, NodeEndpoint: f.nodeEndpoint, NodeRoot: f.nodeRoot, World: f.world}
	if f.params != "" {
		rc.Params = map[string]string{}
		for _, kv := range strings.Split(f.params, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usageError(fs, "--params %q: want k=v,k=v; %q has no =", f.params, kv)
			}
			rc.Params[k] = v
		}
	}
	target := f.endpoint
	switch {
	case f.catalog != "":
		e, ok := csiCatalogEntry(f.catalog)
		if !ok {
			return usageError(fs, "--catalog-driver %q: no such driver in the catalog", f.catalog)
		}
		rc.LaunchFor = e.Launch
		target = "catalog driver " + f.catalog + " (" + e.Doc + ")"
	case f.endpoint == "":
		exe, err := findCSIDriver(f.driver)
		if err != nil {
			return err
		}
		rc.Launch.Executable = exe
		target = exe
		if exe == "" {
			target = "bosh-csi (built into cpilab)"
		}
	}
	return runCertifier(ctx, fs, &f.common, certifier.Certifier{Name: "certify-csi", TargetKind: "CSI driver",
		Areas: csisuite.Areas, ClauseTitles: csisuite.ClauseTitles,
		List: func(opts suites.RunOptions) ([]suites.SpecInfo, error) {
			return suites.ListTree(csisuite.Description, func() { csisuite.Register(&csisuite.RunConfig{Backend: f.backend}) }, opts)
		},
		Run: func(ctx context.Context, opts suites.RunOptions, o certifier.Output) (*certifier.Result, error) {
			rc.EnvOut = o.Out
			if o.Quiet {
				rc.EnvOut = io.Discard
			} else {
				fmt.Fprintf(o.Out, "certifying CSI driver %s (backend %s)\n", target, f.backend)
			}
			report, err := csisuite.Run(ctx, rc, opts)
			if err != nil {
				return nil, err
			}
			return &certifier.Result{Report: report, Target: target, Body: writeCSISpecs,
				Notes: []string{"CSI driver certification (csi-sanity, then BOSH checks), backend " + f.backend},
				Rerun: csiRerunCommand(f, invokedAs())}, nil
		}}, stdout, stderr)
}

// check settles --backend's default and refuses flags that cannot work
// together, as usage errors.
func (f *certifyCSIFlags) check(fs *flag.FlagSet) error {
	if f.backend == "" {
		f.backend = csisuite.BackendBOSH
		if f.endpoint != "" && f.world == "" {
			f.backend = csisuite.BackendNone
		}
	}
	switch {
	case f.backend != csisuite.BackendBOSH && f.backend != csisuite.BackendNone:
		return usageError(fs, "--backend must be %s or %s, not %q", csisuite.BackendBOSH, csisuite.BackendNone, f.backend)
	case f.endpoint != "" && f.backend == csisuite.BackendBOSH && f.world == "":
		return usageError(fs, "--endpoint with --backend bosh: the BOSH checks need the driver on certify-csi's embedded world: give its --world FILE (see --serve-world), or --driver PATH instead, or --backend none")
	case f.world != "" && (f.endpoint == "" || f.backend != csisuite.BackendBOSH || f.nodeEndpoint == ""):
		return usageError(fs, "--world needs --endpoint, --node-endpoint (one per node) and --backend bosh")
	case f.endpoint == "" && (f.nodeEndpoint != "" || f.nodeRoot != "" || f.params != ""):
		return usageError(fs, "--node-endpoint, --node-root and --params need --endpoint")
	case f.endpoint != "" && (f.driver != "" || f.catalog != ""):
		return usageError(fs, "--endpoint certifies a running driver: it excludes --driver and --catalog-driver")
	case f.driver != "" && f.catalog != "":
		return usageError(fs, "--driver and --catalog-driver exclude each other")
	case f.nodeRoot != "" && !filepath.IsAbs(f.nodeRoot):
		return usageError(fs, "--node-root %q must be an absolute path", f.nodeRoot)
	}
	return nil
}

// writeCSISpecs lists each spec that ran with its mark, csi-sanity's by
// their full text and the BOSH checks by clause, then the counts.
func writeCSISpecs(w io.Writer, r types.Report, rep *suites.CertifyReport) {
	tw := termsafe.NewWriter(w) // a driver's text shown escaped
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt || !suites.Ran(sr) {
			continue
		}
		text := sr.LeafNodeText
		if len(sr.ContainerHierarchyTexts) > 0 && sr.ContainerHierarchyTexts[0] == csisuite.DescribeSanity {
			text = csisuite.ClauseSanity + ": " + strings.Join(append(sr.ContainerHierarchyTexts[1:], sr.LeafNodeText), " ")
		}
		fmt.Fprintf(tw, "%s %s\n", certifier.Mark(sr), text)
	}
	certifier.WriteCounts(w, rep)
}

// csiRerunCommand returns the command line that reruns one spec, runnable
// as printed from any directory: the cpilab the user ran (argv0), the
// driver's absolute path, and every flag that changes what a spec does.
func csiRerunCommand(f certifyCSIFlags, argv0 string) func(focus string) string {
	return func(focus string) string {
		parts := []string{shellWord(argv0), "certify-csi"}
		for _, fl := range [][2]string{{"--endpoint", f.endpoint}, {"--node-endpoint", f.nodeEndpoint}, {"--node-root", f.nodeRoot}, {"--params", f.params}, {"--world", absPath(f.world)}, {"--driver", absPath(f.driver)}, {"--catalog-driver", f.catalog}} {
			if fl[1] != "" {
				parts = append(parts, fl[0], shellWord(fl[1]))
			}
		}
		if def := map[bool]string{true: csisuite.BackendNone, false: csisuite.BackendBOSH}[f.endpoint != "" && f.world == ""]; f.backend != def {
			parts = append(parts, "--backend", f.backend)
		}
		if f.common.Strict {
			parts = append(parts, "--strict")
		}
		return strings.Join(append(parts, "--focus", shellWord(focus)), " ")
	}
}

// absPath is p made absolute, so that a printed command runs from any
// directory ("" stays "").
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// findCSIDriver returns the driver executable to certify ("" with no
// error: the bosh-csi built into cpilab).
func findCSIDriver(flagPath string) (string, error) {
	if flagPath != "" {
		p, err := filepath.Abs(flagPath)
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("--driver %s: not an executable file", flagPath)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "bosh-csi")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("bosh-csi"); err == nil {
		return filepath.Abs(p)
	} else if !errors.Is(err, exec.ErrNotFound) {
		return "", err
	}
	return "", nil
}

// csiCatalogEntry finds a catalog driver by name.
func csiCatalogEntry(name string) (csidrivers.Entry, bool) {
	for _, e := range append(csidrivers.Bugs(), csidrivers.Variants()...) {
		if e.Name == name {
			return e, true
		}
	}
	return csidrivers.Entry{}, false
}

// serveCSIWorld starts the embedded world, writes its world file and
// serves until ctx ends (an interrupt).
func serveCSIWorld(ctx context.Context, path string, stdout io.Writer) error {
	dir, err := os.MkdirTemp("", "csiw")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env, err := flex.StartEnv(ctx, flex.EnvConfig{Dir: filepath.Join(dir, "w"), Nodes: 2, Out: stdout})
	if err != nil {
		return err
	}
	defer env.Close()
	if err := csisuite.WriteWorld(path, env); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "world file %s written: start the driver's controller with the director and client it names, one node plugin per node (instance id, VM root), then run\n"+
		"  cpilab certify-csi --endpoint CONTROLLER --node-endpoint NODE0,NODE1 --world %s\nserving until interrupted\n", path, path)
	<-ctx.Done()
	return nil
}

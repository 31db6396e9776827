package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/fixtures/csidrivers"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/csisuite"
	"github.com/cpilab/cpilab/suites/flex"
	"github.com/onsi/ginkgo/v2/types"
)

func init() {
	commands["certify-csi"] = command{summary: "certify a CSI driver (the project's bosh-csi by default): csi-sanity, then BOSH checks against an embedded director, agents and fake cloud", run: runCertifyCSI}
}

type certifyCSIFlags struct {
	endpoint, nodeEndpoint, nodeRoot, driver, backend string
	catalog, params, world, serveWorld                string
	labelFilter, focus                                string
	junit, jsonReport, html                           string
	verbose                                           bool
}

func (f certifyCSIFlags) reports() reportPaths {
	return reportPaths{json: f.jsonReport, junit: f.junit, html: f.html}
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
	fs.StringVar(&f.labelFilter, "label-filter", "", "run only specs matching this Ginkgo label filter (e.g. area:attach)")
	fs.StringVar(&f.focus, "focus", "", "run only specs whose text matches this regexp")
	fs.StringVar(&f.junit, "junit-report", "", "write a JUnit report to `FILE`")
	fs.StringVar(&f.jsonReport, "json-report", "", "write a JSON report to `FILE`")
	fs.StringVar(&f.html, "html-report", "", "write an HTML report (verdict, summary, failures) to `FILE`")
	fs.BoolVar(&f.verbose, "v", false, "verbose Ginkgo output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
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
	}
	if f.serveWorld != "" {
		return serveCSIWorld(ctx, f.serveWorld, stdout)
	}
	if err := f.reports().check(fs); err != nil {
		return err
	}
	rc := csisuite.RunConfig{Backend: f.backend, Endpoint: f.endpoint, NodeEndpoint: f.nodeEndpoint, NodeRoot: f.nodeRoot, World: f.world, EnvOut: stdout}
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
	if f.nodeRoot != "" && !filepath.IsAbs(f.nodeRoot) {
		return usageError(fs, "--node-root %q must be an absolute path", f.nodeRoot)
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
	opts := suites.RunOptions{LabelFilter: f.labelFilter, Output: stdout, Verbose: f.verbose}
	if f.focus != "" {
		opts.Focus = []string{f.focus}
	}
	prog := newProgress(stderr)
	opts.Progress = prog.update
	fmt.Fprintf(stdout, "certifying CSI driver %s (backend %s)\n", target, f.backend)
	start := time.Now() // I/O edge: the run's wall time, for the report
	report, err := csisuite.Run(ctx, rc, opts)
	prog.done()
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	sum := suites.Summarize(report)
	fails := suites.Failures(report, csiRerunCommand(f))
	writeCSISpecs(stdout, report)
	suites.WriteCounts(stdout, sum.Passed, sum.Failed, sum.Skipped, sum.NotChecked)
	if len(fails) > 0 {
		fmt.Fprintf(stdout, "\nFailures (%d):\n\n", len(fails))
		for _, fl := range fails {
			fl.WriteText(stdout)
			fmt.Fprintln(stdout)
		}
	}
	rep := suites.NewCertifyReport(report, suites.ReportRun{Target: target, Command: os.Args,
		Notes: []string{"CSI driver certification (csi-sanity, then BOSH checks), backend " + f.backend}, Started: start, Duration: elapsed,
		Rerun: csiRerunCommand(f)})
	if err := f.reports().write(rep, stdout); err != nil {
		return err
	}
	switch {
	case len(fails) > 0 || sum.Failed > 0 || !report.SuiteSucceeded:
		var clauses []string
		for _, fl := range fails {
			c, _, _ := strings.Cut(fl.Violation.Clause, ":")
			clauses = append(clauses, c)
		}
		fmt.Fprintf(stdout, "REJECTED: %d failed (%s), %d passed, %d not checked (%s)\n", max(sum.Failed, len(fails)), strings.Join(dedup(clauses), ", "), sum.Passed, sum.Skipped, elapsed)
		return exitError(1)
	case sum.Passed == 0:
		fmt.Fprintf(stdout, "NOTHING CHECKED: no spec ran and passed (%d not checked; check --label-filter/--focus) (%s)\n", sum.Skipped, elapsed)
		return exitError(1)
	}
	fmt.Fprintf(stdout, "ACCEPTED: %d passed, %d not checked (%s)\n", sum.Passed, sum.Skipped, elapsed)
	return nil
}

// writeCSISpecs lists each spec that ran with its mark: csi-sanity's by
// their full text, the BOSH checks by clause.
func writeCSISpecs(w io.Writer, r types.Report) {
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt || !suites.Ran(sr) {
			continue
		}
		mark := "✔"
		switch {
		case sr.State.Is(types.SpecStateSkipped | types.SpecStatePending):
			mark = "–"
		case sr.Failed():
			mark = "✘"
		}
		text := sr.LeafNodeText
		if len(sr.ContainerHierarchyTexts) > 0 && sr.ContainerHierarchyTexts[0] == csisuite.DescribeSanity {
			text = csisuite.ClauseSanity + ": " + strings.Join(append(sr.ContainerHierarchyTexts[1:], sr.LeafNodeText), " ")
		}
		fmt.Fprintf(w, "%s %s\n", mark, text)
	}
}

func dedup(in []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// csiRerunCommand returns the command line that reruns one spec.
func csiRerunCommand(f certifyCSIFlags) func(focus string) string {
	return func(focus string) string {
		parts := []string{"cpilab", "certify-csi"}
		for _, fl := range [][2]string{{"--endpoint", f.endpoint}, {"--node-endpoint", f.nodeEndpoint}, {"--node-root", f.nodeRoot}, {"--params", f.params}, {"--world", f.world}, {"--driver", f.driver}, {"--catalog-driver", f.catalog}} {
			if fl[1] != "" {
				parts = append(parts, fl[0], shellWord(fl[1]))
			}
		}
		if def := map[bool]string{true: csisuite.BackendNone, false: csisuite.BackendBOSH}[f.endpoint != "" && f.world == ""]; f.backend != def {
			parts = append(parts, "--backend", f.backend)
		}
		return strings.Join(append(parts, "--focus", shellWord(focus)), " ")
	}
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

package csisuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/flex"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
)

// RunConfig configures Register and Run.
type RunConfig struct {
	// Backend is BackendBOSH (default) or BackendNone.
	Backend string
	// Launch starts the driver on the embedded world (BOSH backend, or no
	// Endpoint given).
	Launch Launch
	// LaunchFor, when set, replaces Launch once the world is up (a
	// catalog driver whose bug names one of its instances).
	LaunchFor func(env *flex.Env) Launch
	// Endpoint and NodeEndpoint name an already running driver instead
	// (BackendNone only): the controller's socket and the node plugin's
	// (default the same). Staging and target paths are then on this host.
	Endpoint, NodeEndpoint string
	// NodeRoot, with Endpoint, is the node plugin's filesystem root as
	// this host sees it (a cpilab VM root, for a driver with the vmroot
	// mounter): csi-sanity's staging and target paths are made inside it.
	// Default: this host's paths, in WorkDir.
	NodeRoot string
	// World, with Endpoint and BackendBOSH, is a world file (WriteWorld)
	// of the embedded world the running driver was started on: the BOSH
	// checks are made on it. NodeEndpoint then lists one node endpoint
	// per node of the world, comma-separated, in its order.
	World string
	// Params are CreateVolume's parameters in csi-sanity (default: the
	// embedded world's disk pool with a BOSH backend).
	Params map[string]string
	// WorkDir holds sockets, configs, logs and the world; default a
	// temporary directory removed afterwards (keep it short: sockets).
	WorkDir string
	// EnvOut receives the embedded world's start-up lines.
	EnvOut io.Writer
}

// The suite's two top containers.
const (
	DescribeSanity = "csi-sanity"
	describeBOSH   = "BOSH checks"
)

// Register adds csi-sanity and the BOSH checks to the current Ginkgo
// tree. Sanity's specs carry the clause ClauseSanity.
func Register(rc *RunConfig) bool {
	scfg := sanity.NewTestConfig()
	var s *Session
	BeforeSuite(func(ctx SpecContext) {
		if rc.Backend == "" {
			rc.Backend = BackendBOSH
		}
		if rc.WorkDir == "" {
			dir, err := os.MkdirTemp("", "csi")
			if err != nil {
				Fail(err.Error())
			}
			DeferCleanup(os.RemoveAll, dir)
			rc.WorkDir = dir
		}
		if rc.Endpoint != "" && rc.World != "" {
			env, err := LoadWorld(ctx, rc.World)
			if err != nil {
				Fail(fmt.Sprintf("%s: %v", ClauseSetup, err))
			}
			nodes := strings.Split(rc.NodeEndpoint, ",")
			s, err = NewSession(ctx, Config{Backend: rc.Backend, WorkDir: filepath.Join(rc.WorkDir, "s"),
				External: &Driver{Controller: rc.Endpoint, Nodes: nodes}}, env)
			if err != nil {
				Fail(fmt.Sprintf("%s: reaching the driver: %v", ClauseSetup, err))
			}
			DeferCleanup(s.Close)
			params := rc.Params
			if params == nil {
				params = map[string]string{"diskPool": env.DiskPool}
			}
			scfg = SanityConfig(rc.Endpoint, nodes[0], env.Nodes[0].Root, params)
			return
		}
		if rc.Endpoint != "" {
			node := rc.NodeEndpoint
			if node == "" {
				node = rc.Endpoint
			}
			scfg = SanityConfig(rc.Endpoint, node, rc.NodeRoot, rc.Params)
			if rc.NodeRoot == "" {
				scfg.StagingPath, scfg.TargetPath = filepath.Join(rc.WorkDir, "staging"), filepath.Join(rc.WorkDir, "target")
			}
			return
		}
		env, err := flex.StartEnv(ctx, flex.EnvConfig{Dir: filepath.Join(rc.WorkDir, "w"), Nodes: 2, Out: rc.EnvOut})
		if err != nil {
			Fail(fmt.Sprintf("%s: starting the embedded director: %v", ClauseSetup, err))
		}
		DeferCleanup(env.Close)
		l := rc.Launch
		if rc.LaunchFor != nil {
			l = rc.LaunchFor(env)
		}
		s, err = NewSession(ctx, Config{Backend: rc.Backend, Launch: l, WorkDir: filepath.Join(rc.WorkDir, "s")}, env)
		if err != nil {
			Fail(fmt.Sprintf("%s: starting the driver: %v", ClauseSetup, err))
		}
		DeferCleanup(s.Close)
		params := rc.Params
		if params == nil {
			params = map[string]string{"diskPool": env.DiskPool}
		}
		scfg = SanityConfig(s.drv.Controller, s.drv.Nodes[0], env.Nodes[0].Root, params)
	})
	Describe(DescribeSanity, Label("row:csi", "area:sanity", "clause:"+ClauseSanity), func() { sanity.GinkgoTest(&scfg) })
	// csi-sanity's specs: the clause, and the failure as a violation of it.
	BeforeEach(func() {
		if !isBOSHSpec(CurrentSpecReport()) {
			AddReportEntry(suites.EntryClause, ClauseSanity, ReportEntryVisibilityNever)
		}
	})
	AfterEach(func() {
		sr := CurrentSpecReport()
		if !isBOSHSpec(sr) && sr.Failed() {
			AddReportEntry(suites.ReportEntryViolation, suites.Violation{Clause: ClauseSanity + ": " + ClauseTitles[ClauseSanity],
				Did: "csi-sanity " + sr.FullText() + ": " + sr.Failure.Message, ExitCode: -1}, ReportEntryVisibilityNever)
		}
	})
	Describe(describeBOSH, Ordered, ContinueOnFailure, func() {
		for _, c := range Checks() {
			It(c.Clause+": "+ClauseTitles[c.Clause], Label("row:csi", "area:"+clauseArea[c.Clause], "clause:"+c.Clause), func(ctx SpecContext) {
				AddReportEntry(suites.EntryClause, c.Clause, ReportEntryVisibilityNever)
				if s == nil {
					Skip(fmt.Sprintf("the driver at %s was not started by cpilab on its embedded BOSH world (--backend %s)", rc.Endpoint, rc.Backend))
				}
				o := s.RunCheck(ctx, c)
				switch {
				case o.Skip != nil:
					Skip(o.Skip.Reason)
				case o.Violation != nil:
					report(o.Violation)
				case o.Err != nil:
					report(&Violation{Clause: ClauseSetup, Did: o.Err.Error()})
				}
			})
		}
	})
	return true
}

func isBOSHSpec(sr types.SpecReport) bool {
	return len(sr.ContainerHierarchyTexts) > 0 && sr.ContainerHierarchyTexts[0] == describeBOSH
}

// report fails the spec with v.
func report(v *Violation) {
	GinkgoHelper()
	AddReportEntry(suites.ReportEntryViolation, suites.Violation{Clause: v.Clause + ": " + ClauseTitles[v.Clause], Did: v.Did,
		Method: v.Method, Request: v.Request, Response: v.Response, ExitCode: -1}, ReportEntryVisibilityNever)
	Fail(v.Error())
}

// Run registers the suite and runs it outside go test (cpilab
// certify-csi). It owns the process's Ginkgo state: call it once per
// process.
func Run(_ context.Context, rc RunConfig, opts suites.RunOptions) (types.Report, error) {
	if rc.Endpoint != "" && rc.Backend == BackendBOSH && rc.World == "" {
		return types.Report{}, errors.New("csisuite: the BOSH checks need the driver started on cpilab's embedded world: give its world file, or use --backend none with --endpoint")
	}
	return suites.RunTree(Description, func() { Register(&rc) }, opts)
}

// Areas are the report's columns for this suite, in order, with what each
// checks (the legend of its matrix).
var Areas = []suites.AreaDoc{
	{ID: "sanity", Title: "csi-sanity: every spec that applies to the driver's declared capabilities"},
	{ID: "identity", Title: "the node id is the BOSH instance; Director calls hold only dynamic-disk scopes"},
	{ID: "controller", Title: "CreateVolume idempotent, sized and conflict-checked; error codes; ListVolumes pages"},
	{ID: "attach", Title: "publish attaches the disk to the node's VM, idempotently; unpublish detaches"},
	{ID: "node", Title: "staging waits for the device, mounts the right one, read-only when asked, and cleans up"},
	{ID: "data", Title: "data survives restaging and moves between nodes; only a blank device is formatted"},
	{ID: "expand", Title: "expansion, when declared, grows the cloud disk and the filesystem"},
	{ID: "faults", Title: "with the Director down, controller calls fail UNAVAILABLE and converge on retry"},
}

// Description is the suite's Ginkgo description.
const Description = "cpilab CSI driver certification"

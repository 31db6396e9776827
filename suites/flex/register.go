package flex

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cpilab/cpilab/suites"
	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
)

// RunConfig configures Register and Run.
type RunConfig struct {
	// Config is the driver under test. WorkDir defaults to a temporary
	// directory removed afterwards.
	Config
	// Env is the BOSH world; nil starts an embedded one (Director, agents,
	// fake cloud) for the run.
	Env *Env
	// EnvOut receives the embedded world's start-up lines.
	EnvOut io.Writer
}

// Areas group the clauses in the summary (its columns).
var clauseArea = map[string]string{
	ClauseInstall: "install", ClauseInitCapabilities: "install",
	ClauseOutputUnknown: "protocol", ClauseOutputExit: "protocol", ClauseNotSupportedStable: "protocol",
	ClauseAttachDevice: "attach", ClauseAttachNode: "attach", ClauseAttachExclusive: "attach", ClauseDetach: "attach",
	ClauseMountIdempotent: "mount", ClauseLifecycle: "mount",
	ClauseFormatBlankOnly: "data", ClauseDataMoves: "data",
	ClauseFaultDirectorDown: "faults", ClauseFaultTaskFailed: "faults", ClauseMountRacesDetach: "faults", ClauseExpand: "expand",
}

// Areas are the report's columns for this suite, in order, with what each
// checks (the legend of its matrix).
var Areas = []suites.AreaDoc{
	{ID: "install", Title: "the driver installs where kubelet's prober finds it, and init answers its capabilities"},
	{ID: "protocol", Title: "each call-out answers one JSON object with a known status and the matching exit status"},
	{ID: "attach", Title: "attach, waitforattach, isattached and detach name the right device and node, idempotently and exclusively"},
	{ID: "mount", Title: "mountdevice and unmountdevice are idempotent; a volume's life cycle leaves nothing behind"},
	{ID: "data", Title: "a disk is formatted only when blank, and its data moves with it to another node"},
	{ID: "faults", Title: "a Director that is down, a failed task, a mount racing a detach: clear failures, nothing lost"},
	{ID: "expand", Title: "a driver that declares expansion grows the disk and its filesystem"},
}

// Description is the suite's Ginkgo description.
const Description = "cpilab FlexVolume driver certification"

// Register adds the FlexVolume driver suite to the current Ginkgo tree.
// rc is read when the specs run, so a BeforeSuite may still fill it in.
func Register(rc *RunConfig) bool {
	Describe("FlexVolume driver", Ordered, ContinueOnFailure, func() {
		var s *Session
		BeforeAll(func(ctx SpecContext) {
			if rc.WorkDir == "" {
				dir, err := os.MkdirTemp("", "cpilab-certify-flex-")
				if err != nil {
					Fail(err.Error())
				}
				DeferCleanup(os.RemoveAll, dir)
				rc.WorkDir = dir
			}
			if rc.Env == nil {
				env, err := StartEnv(ctx, EnvConfig{Dir: filepath.Join(rc.WorkDir, "world"), Out: rc.EnvOut})
				if err != nil {
					failWith(ClauseSetup, nil, "starting the embedded director: %v", err)
				}
				DeferCleanup(env.Close)
				rc.Env = env
			}
			cfg := rc.Config
			cfg.WorkDir = filepath.Join(rc.WorkDir, "nodes")
			if cfg.Log == nil {
				cfg.Log = GinkgoWriter
			}
			var err error
			if s, err = NewSession(cfg, rc.Env); err != nil {
				failWith(ClauseSetup, nil, "%v", err)
			}
			DeferCleanup(s.Close)
			if err := s.Prepare(ctx); err != nil {
				report(err)
			}
		})
		for _, c := range Checks() {
			It(c.Clause+": "+ClauseTitles[c.Clause], Label("row:flexvolume", "area:"+clauseArea[c.Clause], "clause:"+c.Clause), func(ctx SpecContext) {
				AddReportEntry(suites.EntryClause, c.Clause, ReportEntryVisibilityNever)
				o := s.RunCheck(ctx, c)
				switch {
				case o.Skip != nil:
					Skip(o.Skip.Reason)
				case o.Violation != nil:
					report(o.Violation)
				case o.Err != nil:
					failWith(ClauseSetup, nil, "%v", o.Err)
				}
			})
		}
	})
	return true
}

// report fails the spec with err, a *Violation when it is one.
func report(err error) {
	GinkgoHelper()
	if v, ok := err.(*Violation); ok {
		sv := suites.Violation{Clause: v.Clause + ": " + ClauseTitles[v.Clause], Did: v.Did, Method: v.Method,
			Request: v.Request, Response: v.Response, ExitCode: v.ExitCode}
		AddReportEntry(suites.ReportEntryViolation, sv, ReportEntryVisibilityNever)
		Fail(v.Error())
	}
	Fail(err.Error())
}

func failWith(clause string, _ any, format string, a ...any) {
	GinkgoHelper()
	report(&Violation{Clause: clause, Did: fmt.Sprintf(format, a...)})
}

// Run registers the suite and runs it outside go test (cpilab
// certify-flex). It owns the process's Ginkgo state: call it once per
// process.
func Run(ctx context.Context, rc RunConfig, opts suites.RunOptions) (types.Report, error) {
	_ = ctx
	return suites.RunTree(Description, func() { Register(&rc) }, opts)
}

// Test registers the suite and runs it inside a go test.
func Test(t GinkgoTestingT, rc RunConfig) bool {
	Register(&rc)
	return RunSpecs(t, Description)
}

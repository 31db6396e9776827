package explore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpimodel"
	"github.com/cpilab/cpilab/cpimodel/explore"
	"github.com/cpilab/cpilab/fixtures/buggycpi"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
)

// catalogDriver runs a catalog bug's CPI in this process (buggycpi.Main,
// as its executable would) on a testbed, and reads the testbed's cloud
// whole.
type catalogDriver struct {
	bug    string
	config string
	ws     cpisuite.WholeState
}

func (d catalogDriver) Call(_ context.Context, req []byte) ([]byte, error) {
	var out, errb bytes.Buffer
	buggycpi.Main("buggy-"+d.bug, []string{"-configPath", d.config}, bytes.NewReader(req), &out, &errb)
	return out.Bytes(), nil
}

func (d catalogDriver) State(ctx context.Context) (cpimodel.State, error) {
	return d.ws.ModelState(ctx)
}

// TestCatalogModelBugsBreakTheModel: the random lifecycles of a default
// certify run (its seed and budget) find every model bug of the catalog
// (fixtures/buggycpi) on its own clause, or one it lists, and find nothing
// in the legal variants of the model's latitude.
func TestCatalogModelBugsBreakTheModel(t *testing.T) {
	// The default run's budget (cpisuite.DefaultExploreSteps with
	// cpisuite.DefaultExploreSeed).
	o := explore.Options{Seed: cpisuite.DefaultExploreSeed, Lifecycles: 2, MaxSteps: 40, NoShrink: true}
	// Each bug or variant on a cloud of its own: what one leaks does not
	// weigh on the next.
	explore1 := func(t *testing.T, name string) *explore.Failure {
		t.Helper()
		t.Setenv("TMPDIR", t.TempDir()) // the bug's own cache files
		d, env := catalogCloud(t, name)
		f, _, err := explore.Explore(context.Background(), d, env, o)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	var bugs, variants []buggycpi.Bug
	for _, b := range buggycpi.Catalog {
		if strings.HasPrefix(b.Clause, "model.") || slices.Contains(lifecycleBugNames, b.Name) {
			bugs = append(bugs, b)
		}
	}
	for _, v := range buggycpi.Variants {
		if slices.Contains(modelVariantNames, v.Name) {
			variants = append(variants, v)
		}
	}
	if testing.Short() {
		// One of each shape.
		bugs = slices.DeleteFunc(bugs, func(b buggycpi.Bug) bool { return !slices.Contains(shortBugs, b.Name) })
	}
	for _, b := range bugs {
		t.Run(b.Name, func(t *testing.T) {
			f := explore1(t, b.Name)
			if f == nil {
				t.Fatalf("the default budget's random lifecycles never broke the model (%s)", b.Story)
			}
			if f.Error != "" {
				t.Fatalf("a lifecycle could not run: %s", f.Error)
			}
			if !slices.Contains(b.MayBreak(), f.Violation.Clause) {
				t.Fatalf("broke %s, not %s (nor a clause the bug lists):\n%s", f.Violation.Clause, b.Clause, f.Explain())
			}
			t.Logf("%d steps: %v", len(f.Steps), f.Violation)
		})
	}
	for _, v := range variants {
		t.Run(v.Name, func(t *testing.T) {
			if f := explore1(t, v.Name); f != nil {
				t.Fatalf("a legal variant broke the model:\n%s", f.Explain())
			}
		})
	}
}

// catalogCloud starts a testbed for bug's CPI and returns the driver and
// the lifecycles' environment.
func catalogCloud(t *testing.T, bug string) (catalogDriver, explore.Env) {
	t.Helper()
	tb, err := testbed.Start(testbed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	cfg, err := tb.SuiteConfig([]string{"buggy-cpi"})
	if err != nil {
		t.Fatal(err)
	}
	ws, ok := cfg.Oracle.(cpisuite.WholeState)
	if !ok {
		t.Fatal("the testbed's oracle cannot read the whole cloud")
	}
	config, err := tb.CPIConfig(testbed.CPISetup{})
	if err != nil {
		t.Fatal(err)
	}
	env := explore.Env{Stemcells: map[int]explore.StemcellImage{}, MaxAPIVersion: 3, RunID: "catalog-model",
		DiskCloudProperties: mustMarshal(cfg.Env.DiskCloudProperties), VMCloudProperties: json.RawMessage(`{}`),
		Networks: json.RawMessage(`{"default":{"type":"manual","ip":"10.0.0.5","netmask":"255.255.255.0","gateway":"10.0.0.1","default":["dns","gateway"]}}`)}
	for v, sc := range cfg.Env.Stemcells {
		env.Stemcells[v] = explore.StemcellImage{Path: sc.ImagePath}
	}
	return catalogDriver{bug: bug, config: config, ws: ws}, env
}

// The bugs of the catalog on paths a lifecycle walks, whatever their
// clause, and the legal variants of the model's latitude.
var (
	lifecycleBugNames = []string{"get-disks-lists-every-attached", "has-disk-stale-cache", "has-vm-true-after-delete", "get-disks-first-only"}
	modelVariantNames = []string{"legal-metadata-sanitised", "legal-metadata-merge", "legal-get-disks-unordered",
		"legal-snapshot-waits-then-succeeds", "legal-update-disk-new-cid", "legal-disk-size-rounded-up", "legal-resize-not-supported",
		"legal-create-disk-own-tags", "legal-delete-vm-detaches-first", "legal-reboot-hard-after-soft"}
	shortBugs = []string{"detach-also-other-disk", "reboot-loses-metadata", "update-disk-keeps-old-disk", "get-disks-lists-every-attached"}
)

package cpisuite

import (
	"fmt"
	"strings"
	"sync"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// ContractContext is one caller profile × CPI setup the contract suite runs
// in: every spec of the suite runs once per context.
type ContractContext struct {
	// Name is the row name in the summary and the "row:" label value.
	Name    string
	Profile cpiv2.Profile
	Switch  Switch
	// Stemcell is the stemcell api_version used for VMs (1 or 2).
	Stemcell int
	// Thorough adds the checks whose outcome does not depend on the caller
	// profile, only on the api_version's shapes, and which cost many calls:
	// every hint style of the environment, the data kept across delete_vm
	// (over SFTP) and the 8-call parallel proof. DefaultContexts marks one
	// context per api_version family (2+ and 1); the other contexts check
	// the hint of the default style and the disks kept by delete_vm.
	Thorough bool
}

// APIVersion is the api_version the context negotiates with a CPI that
// honours its cap and supports api_version 3.
func (cc ContractContext) APIVersion() int {
	v, _ := negotiate(cc.Profile, capOr3(cc.Switch.APIVersionCap))
	return v
}

func capOr3(c int) int {
	if c == 0 {
		return 3
	}
	return c
}

// DefaultContexts covers api_version 1, 2 and 3 and every caller profile.
var DefaultContexts = []ContractContext{
	{Name: "director-current.api3", Profile: cpiv2.ProfileDirectorCurrent, Switch: Switch{NoRegistry: true}, Stemcell: 2, Thorough: true},
	{Name: "director-v2.api2", Profile: cpiv2.ProfileDirectorV2, Stemcell: 2},
	{Name: "director-v2.cpi1", Profile: cpiv2.ProfileDirectorV2, Switch: Switch{APIVersionCap: 1}, Stemcell: 1},
	{Name: "director-v1.api1", Profile: cpiv2.ProfileDirectorV1, Stemcell: 1, Thorough: true},
	{Name: "cli.api2", Profile: cpiv2.ProfileCLI, Stemcell: 2},
}

// spec labels.
func labels(area string, methods ...string) Labels {
	l := Labels{"area:" + area}
	for _, m := range methods {
		l = append(l, "method:"+m)
	}
	return l
}

var capOracle = Label("cap:oracle")

// describeContract registers the CPI contract suite.
func describeContract(cfg *Config) {
	Describe("CPI contract", Label("suite:contract"), func() {
		for _, cc := range cfg.withDefaults().Contexts {
			contractContext(cfg, cc)
		}
		describeExplore(cfg)
	})
}

// contractSpecs is what the specs of one contract context share: its
// state, and the objects its setup makes (set when the setup runs, read
// when a spec runs).
type contractSpecs struct {
	cc ContractContext
	st *state
	// stemcell is the context's stemcell CID; mainVM a VM that lives as
	// long as the context; ghostVM and ghostDisk a VM and a disk the setup
	// created and deleted (missing objects for the errors specs).
	stemcell, mainVM, ghostVM, ghostDisk string
}

// contractContext registers one context of the contract suite: its setup,
// every area's specs in a fixed order (the context is Ordered), and its
// clean-up.
func contractContext(cfg *Config, cc ContractContext) {
	st := &state{profile: cc.Profile, sw: cc.Switch}
	c := &contractSpecs{cc: cc, st: st}
	lbl := Label("row:"+cc.Name, "profile:"+cc.Profile.Name, fmt.Sprintf("api:%d", cc.APIVersion()))
	Context(cc.Name, lbl, Ordered, ContinueOnFailure, func() {
		BeforeAll(func() {
			st.cfg = cfg.withDefaults()
			st.name = "context " + cc.Name
			st.names = &names{prefix: st.cfg.RunID + "-" + strings.ReplaceAll(cc.Name, ".", "-")}
			st.setup = func(ctx SpecContext) {
				if _, st.skip = st.stemcellFor(cc.Stemcell); st.skip != "" {
					return
				}
				st.takeInventory(ctx)
				if _, st.skip = st.connect(ctx, false); st.skip != "" {
					return
				}
				c.stemcell = st.createStemcell(ctx, st.shared, cc.Stemcell)
				c.mainVM = st.createVM(ctx, st.shared, c.stemcell, cc.Stemcell).CID
				g := st.createVM(ctx, st.shared, c.stemcell, cc.Stemcell)
				mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteVM, g.CID, g.CID), ClauseSetup)
				st.shared.Forget(Resource{Kind: KindVM, CID: g.CID})
				c.ghostVM = g.CID
				c.ghostDisk = st.createDisk(ctx, st.shared, st.cfg.Env.DiskSizeMiB, "")
				mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteDisk, "", c.ghostDisk), ClauseSetup)
				st.shared.Forget(Resource{Kind: KindDisk, CID: c.ghostDisk})
			}
		})
		BeforeEach(func(ctx SpecContext) { st.beforeSpec(ctx) })
		AfterAll(func() { st.afterContainer() })

		It(ClauseText(ClauseSetup), labels("setup", cpiv2.MethodInfo, cpiv2.MethodCreateStemcell, cpiv2.MethodCreateVM,
			cpiv2.MethodDeleteVM, cpiv2.MethodCreateDisk, cpiv2.MethodDeleteDisk), func(ctx SpecContext) {
			st.ensureSetup(ctx)
			st.skipIfSkipped()
		})

		c.vmSpecs()

		c.diskSpecs()

		c.attachSpecs()

		c.errorSpecs()

		c.vmLifecycleSpecs()

		c.diskChangeSpecs()

		c.lifecycleSpecs()

		It(ClauseText(ClauseTeardown), labels("cleanup", cpiv2.MethodDeleteVM, cpiv2.MethodDeleteStemcell), func(ctx SpecContext) {
			st.teardown(ctx)
		})

		It(ClauseText(ClauseNoLeak), labels("cleanup"), func(ctx SpecContext) {
			st.checkNoLeak(ctx)
		})
	})
}

// skipIfNotImplemented skips the spec when the CPI answers NotImplemented,
// which the Director tolerates for optional methods.
func skipIfNotImplemented(x *Exchange) {
	GinkgoHelper()
	checkWire(x)
	if cpiv2.IsNotImplemented(x.Response.Error) {
		notChecked(fmt.Sprintf("the CPI answers NotImplemented for %s (the Director skips it)", x.Method))
	}
}

// skipIfNotSupported skips when the CPI answers NotSupported or
// NotImplemented, which the Director handles by copying the disk.
func skipIfNotSupported(x *Exchange, method string) {
	GinkgoHelper()
	checkWire(x)
	if e := x.Response.Error; e != nil && (e.Type == cpiv2.TypeNotSupported || cpiv2.IsNotImplemented(e)) {
		skipWith(fmt.Sprintf("handled: %s answered %s; the Director falls back to copying the disk", method, e.Type))
	}
}

// parallel runs fn(0..n-1) at once and waits.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer GinkgoRecover()
			fn(i)
		})
	}
	wg.Wait()
}

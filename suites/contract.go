package suites

import (
	"fmt"
	"slices"
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

func contractContext(cfg *Config, cc ContractContext) {
	st := &state{profile: cc.Profile, sw: cc.Switch}
	var stemcell, mainVM, ghostVM, ghostDisk string
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
				stemcell = st.createStemcell(ctx, st.shared, cc.Stemcell)
				mainVM = st.createVM(ctx, st.shared, stemcell, cc.Stemcell).CID
				g := st.createVM(ctx, st.shared, stemcell, cc.Stemcell)
				mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteVM, g.CID, g.CID), ClauseSetup)
				st.shared.Forget(Resource{Kind: KindVM, CID: g.CID})
				ghostVM = g.CID
				ghostDisk = st.createDisk(ctx, st.shared, st.cfg.Env.DiskSizeMiB, "")
				mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteDisk, "", ghostDisk), ClauseSetup)
				st.shared.Forget(Resource{Kind: KindDisk, CID: ghostDisk})
			}
		})
		BeforeEach(func(ctx SpecContext) { st.beforeSpec(ctx) })
		AfterAll(func() { st.afterContainer() })

		It(ClauseText(ClauseSetup), labels("setup", cpiv2.MethodInfo, cpiv2.MethodCreateStemcell, cpiv2.MethodCreateVM,
			cpiv2.MethodDeleteVM, cpiv2.MethodCreateDisk, cpiv2.MethodDeleteDisk), func(ctx SpecContext) {
			st.ensureSetup(ctx)
			st.skipIfSkipped()
		})

		It(ClauseText(ClauseInfo), labels("shapes", cpiv2.MethodInfo), func(ctx SpecContext) {
			x := st.client.CallRaw(ctx, cpiv2.MethodInfo, st.profile.InfoAPIVersion, 0)
			mustOK(x, ClauseInfo)
			var info struct {
				StemcellFormats []any `json:"stemcell_formats"`
			}
			if err := jsonUnmarshal(x.Response.Result, &info); err != nil || len(info.StemcellFormats) == 0 {
				violate(violation(ClauseInfo, fmt.Sprintf("info must list stemcell_formats, returned %s", excerpt(x.Response.Result)), x))
			}
			for _, f := range info.StemcellFormats {
				if _, ok := f.(string); !ok {
					violate(violation(ClauseInfo, fmt.Sprintf("stemcell_formats must be strings, got %v", f), x))
				}
			}
		})

		It(ClauseText(ClauseStemcell), labels("shapes", cpiv2.MethodCreateStemcell, cpiv2.MethodDeleteStemcell), func(ctx SpecContext) {
			t := st.tracker()
			cid := st.createStemcell(ctx, t, cc.Stemcell)
			x := st.client.Call(ctx, cpiv2.MethodDeleteStemcell, "", cid)
			mustUnread(x, ClauseStemcell)
			t.Forget(Resource{Kind: KindStemcell, CID: cid})
			if o := st.cfg.Oracle; o != nil {
				if inv := st.inventory(ctx); slices.Contains(inv.Stemcells, cid) {
					violate(violation(ClauseStemcellTruth, fmt.Sprintf("delete_stemcell of %s succeeded, but the IaaS still has it", cid), x))
				}
			}
		})

		It(ClauseText(ClauseCreateVM), labels("shapes", cpiv2.MethodCreateVM), func(ctx SpecContext) {
			// The setup already created two VMs and checked their shape; this
			// spec makes the check visible on its own, with networks.
			st.createVM(ctx, st.tracker(), stemcell, cc.Stemcell)
		})

		It(ClauseText(ClauseHasVM), labels("truth", cpiv2.MethodCreateVM, cpiv2.MethodHasVM, cpiv2.MethodDeleteVM), func(ctx SpecContext) {
			t := st.tracker()
			v := st.createVM(ctx, t, stemcell, cc.Stemcell)
			if ok, x := st.callBool(ctx, ClauseHasVM, cpiv2.MethodHasVM, v.CID); !ok {
				violate(violation(ClauseHasVM, "has_vm returned false for a VM it just created", x))
			}
			mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteVM, v.CID, v.CID), ClauseHasVM)
			t.Forget(Resource{Kind: KindVM, CID: v.CID})
			if ok, x := st.callBool(ctx, ClauseHasVM, cpiv2.MethodHasVM, v.CID); ok {
				violate(violation(ClauseHasVM, "has_vm returned true for a VM it just deleted", x))
			}
		})

		It(ClauseText(ClauseHasVM)+" (IaaS state)", labels("iaas", cpiv2.MethodCreateVM, cpiv2.MethodDeleteVM), capOracle, func(ctx SpecContext) {
			o := st.oracle()
			t := st.tracker()
			v := st.createVM(ctx, t, stemcell, cc.Stemcell)
			if _, ok, err := o.VM(ctx, v.CID); err != nil || !ok {
				violate(violation(ClauseHasVM, fmt.Sprintf("create_vm returned %s but the IaaS has no such VM (oracle: %v)", v.CID, err), v.X))
			}
			x := st.client.Call(ctx, cpiv2.MethodDeleteVM, v.CID, v.CID)
			mustUnread(x, ClauseHasVM)
			t.Forget(Resource{Kind: KindVM, CID: v.CID})
			if _, ok, err := o.VM(ctx, v.CID); err != nil || ok {
				violate(violation(ClauseHasVM, fmt.Sprintf("delete_vm succeeded but the IaaS still has VM %s (oracle: %v)", v.CID, err), x))
			}
			if s, err := o.Settings(ctx, v.CID); err != nil {
				Fail(fmt.Sprintf("oracle settings: %v", err))
			} else if s.Registry != nil {
				violate(violation(ClauseTableRegistry, fmt.Sprintf("delete_vm of %s succeeded but the registry still holds its settings %s (a later VM could read them)", v.CID, excerpt(s.Registry)), x))
			}
		})

		It(ClauseText(ClauseDeleteVMGone), labels("errors", cpiv2.MethodDeleteVM), func(ctx SpecContext) {
			x := st.client.Call(ctx, cpiv2.MethodDeleteVM, "", ghostVM)
			checkWire(x)
			if e := x.Response.Error; e != nil && e.Type != cpiv2.TypeVMNotFound {
				violate(violation(ClauseDeleteVMGone, fmt.Sprintf("delete_vm of deleted VM %s returned %s: %q (the Director tolerates only VMNotFound)", ghostVM, e.Type, e.Message), x))
			}
		})

		It(ClauseText(ClauseHasDisk), labels("truth", cpiv2.MethodHasDisk, cpiv2.MethodCreateDisk, cpiv2.MethodDeleteDisk), func(ctx SpecContext) {
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
			if ok, x := st.callBool(ctx, ClauseHasDisk, cpiv2.MethodHasDisk, d); !ok {
				violate(violation(ClauseHasDisk, "has_disk returned false for a disk it just created", x))
			}
			mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteDisk, "", d), ClauseHasDisk)
			t.Forget(Resource{Kind: KindDisk, CID: d})
			if ok, x := st.callBool(ctx, ClauseHasDisk, cpiv2.MethodHasDisk, d); ok {
				violate(violation(ClauseHasDisk, "has_disk returned true for a disk it just deleted", x))
			}
		})

		It(ClauseText(ClauseCreateDisk), labels("iaas", cpiv2.MethodCreateDisk), capOracle, func(ctx SpecContext) {
			st.oracle()
			// A size that is no multiple of a GiB: a cloud may round it up
			// to the next GiB, never down. createDisk checks size and
			// cloud_properties against the oracle.
			st.createDisk(ctx, st.tracker(), st.cfg.Env.DiskSizeMiB+3, "")
		})

		It(ClauseText(ClauseDeleteDisk), labels("errors", cpiv2.MethodDeleteDisk), func(ctx SpecContext) {
			x := st.client.Call(ctx, cpiv2.MethodDeleteDisk, "", ghostDisk)
			checkWire(x)
			if e := x.Response.Error; e != nil && e.Type != cpiv2.TypeDiskNotFound {
				violate(violation(ClauseDeleteDisk, fmt.Sprintf("delete_disk of deleted disk %s returned %s: %q (a generic error breaks the Director's orphan disk clean-up)", ghostDisk, e.Type, e.Message), x))
			}
		})

		It(ClauseText(ClauseVMLocality), labels("shapes", cpiv2.MethodCreateDisk), func(ctx SpecContext) {
			st.createDisk(ctx, st.tracker(), st.cfg.Env.DiskSizeMiB, mainVM)
		})

		It(ClauseText(ClauseAttachHint), labels("hints", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk), func(ctx SpecContext) {
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, mainVM)
			st.attach(ctx, t, mainVM, d)
		})

		hintText := " (two disks on one VM)"
		if cc.Thorough {
			hintText = " (two disks on one VM, every hint style)"
		}
		It(ClauseText(ClauseHintDevice)+hintText, labels("hints", cpiv2.MethodCreateVM, cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk), capOracle, func(ctx SpecContext) {
			st.oracle()
			st.checkHintDevices(ctx, stemcell, cc.Stemcell, cc.Thorough)
		})

		It(ClauseText(ClauseGetDisks), labels("truth", cpiv2.MethodCreateVM, cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodGetDisks, cpiv2.MethodDetachDisk), func(ctx SpecContext) {
			t := st.tracker()
			v := st.createVM(ctx, t, stemcell, cc.Stemcell)
			if got, x := st.getDisks(ctx, v.CID); len(got) != 0 {
				violate(violation(ClauseGetDisks, fmt.Sprintf("get_disks of a VM without disks returned %v", got), x))
			}
			d1 := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, v.CID)
			d2 := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, v.CID)
			st.attach(ctx, t, v.CID, d1)
			st.attach(ctx, t, v.CID, d2)
			want := []string{d1, d2}
			slices.Sort(want)
			if got, x := st.getDisks(ctx, v.CID); !slices.Equal(got, want) {
				violate(violation(ClauseGetDisks, fmt.Sprintf("get_disks returned %v, the attached disks are %v", got, want), x))
			}
			st.detach(ctx, t, v.CID, d1)
			if got, x := st.getDisks(ctx, v.CID); !slices.Equal(got, []string{d2}) {
				violate(violation(ClauseGetDisks, fmt.Sprintf("after detaching %s get_disks returned %v, want [%s]", d1, got, d2), x))
			}
		})

		It(ClauseText(ClauseDetach)+" (IaaS state)", labels("iaas", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodDetachDisk), capOracle, func(ctx SpecContext) {
			o := st.oracle()
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, mainVM)
			_, ax := st.attach(ctx, t, mainVM, d)
			if od, ok, err := o.Disk(ctx, d); err != nil || !ok || od.AttachedTo != mainVM {
				violate(violation(ClauseDetach, fmt.Sprintf("attach_disk returned success but the IaaS shows disk %s attached to %q (oracle: %v)", d, od.AttachedTo, err), ax))
			}
			x := st.client.Call(ctx, cpiv2.MethodDetachDisk, mainVM, mainVM, d)
			mustUnread(x, ClauseDetach)
			t.Forget(Resource{Kind: KindAttachment, CID: d, VM: mainVM})
			if od, ok, err := o.Disk(ctx, d); err != nil || !ok || od.AttachedTo != "" {
				violate(violation(ClauseDetach, fmt.Sprintf("detach_disk succeeded but the IaaS shows disk %s still attached to %q (oracle: %v)", d, od.AttachedTo, err), x))
			}
		})

		It(ClauseText(ClauseDetachTwice), labels("errors", cpiv2.MethodCreateDisk, cpiv2.MethodDetachDisk), func(ctx SpecContext) {
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, mainVM)
			x := st.client.Call(ctx, cpiv2.MethodDetachDisk, mainVM, mainVM, d)
			checkWire(x)
			if e := x.Response.Error; e != nil && e.Type != cpiv2.TypeDiskNotAttached {
				violate(violation(ClauseDetachTwice, fmt.Sprintf("detach_disk of a detached disk returned %s: %q (the Director tolerates only DiskNotAttached)", e.Type, e.Message), x))
			}
		})

		It(ClauseText(ClauseAttachTwice), labels("errors", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk), func(ctx SpecContext) {
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, mainVM)
			st.attach(ctx, t, mainVM, d)
			x := st.client.Call(ctx, cpiv2.MethodAttachDisk, mainVM, mainVM, d)
			checkWire(x)
			if e := x.Response.Error; e != nil {
				violate(violation(ClauseAttachTwice, fmt.Sprintf("a second attach_disk of %s to the same VM returned %s: %q", d, e.Type, e.Message), x))
			}
			st.checkHint(x)
		})

		It(ClauseText(ClauseAttachGone), labels("errors", cpiv2.MethodAttachDisk), func(ctx SpecContext) {
			x := st.client.Call(ctx, cpiv2.MethodAttachDisk, mainVM, mainVM, ghostDisk)
			checkWire(x)
			e := x.Response.Error
			if e == nil {
				st.tracker().Add(Resource{Kind: KindAttachment, CID: ghostDisk, VM: mainVM})
				violate(violation(ClauseAttachGone, fmt.Sprintf("attach_disk of deleted disk %s to %s succeeded: the Director would record an attachment that does not exist", ghostDisk, mainVM), x))
			}
			if !e.Type.Known() {
				violate(violation(ClauseAttachGone, fmt.Sprintf("attach_disk of deleted disk %s returned error type %q, which the Director treats as unknown", ghostDisk, e.Type), x))
			}
		})

		contractSettingsSpecs(st, cc, &stemcell, &ghostVM)
		contractLargeRequestSpecs(st, cc, &stemcell)
		contractLocalitySpecs(st, cc, &stemcell)
		contractNetworkSpecs(st, cc, &stemcell)

		It(ClauseText(ClauseMetadataGone), labels("errors", cpiv2.MethodSetVMMetadata), func(ctx SpecContext) {
			x := st.client.Call(ctx, cpiv2.MethodSetVMMetadata, ghostVM, ghostVM, map[string]string{"deployment": st.names.next("dep")})
			checkWire(x)
			e := x.Response.Error
			if e == nil {
				violate(violation(ClauseMetadataGone, fmt.Sprintf("set_vm_metadata of deleted VM %s succeeded", ghostVM), x))
			}
			if cpiv2.IsNotImplemented(e) {
				skipWith("not checked: the CPI answers NotImplemented for set_vm_metadata (the Director skips it)")
			}
			if !e.Type.Known() {
				violate(violation(ClauseMetadataGone, fmt.Sprintf("set_vm_metadata of deleted VM %s returned error type %q, which the Director treats as unknown", ghostVM, e.Type), x))
			}
		})

		It(ClauseText(ClauseUnknownMethod), labels("errors", methodUnknown), func(ctx SpecContext) {
			x := st.client.Call(ctx, unknownMethod, "", "x")
			checkWire(x)
			if e := x.Response.Error; !cpiv2.IsNotImplemented(e) {
				did := "returned no error"
				if e != nil {
					did = fmt.Sprintf("returned %s: %q", e.Type, e.Message)
				}
				violate(violation(ClauseUnknownMethod, "an unknown method "+did, x))
			}
		})

		It(ClauseText(ClauseMalformed), labels("protocol", cpiv2.MethodCreateDisk), func(ctx SpecContext) {
			x := st.client.Call(ctx, cpiv2.MethodCreateDisk, "", "not-a-size", "not-a-hash", 42)
			checkWire(x)
			if x.Response.Error == nil {
				if cid, err := decodeCID[cpiv2.DiskKind](x.Response.Result); err == nil {
					st.tracker().Add(Resource{Kind: KindDisk, CID: cid})
				}
				violate(violation(ClauseMalformed, fmt.Sprintf("create_disk with a string size and a string cloud_properties succeeded with %s", excerpt(x.Response.Result)), x))
			}
		})

		It(ClauseText(ClauseProtocol)+" (error responses)", labels("protocol", methodUnknown, cpiv2.MethodHasDisk, cpiv2.MethodDetachDisk), func(ctx SpecContext) {
			// An error path and a success path, both judged byte by byte;
			// every other call of every spec is judged the same way.
			checkWire(st.client.Call(ctx, unknownMethod, ""))
			checkWire(st.client.Call(ctx, cpiv2.MethodHasDisk, "", ghostDisk))
			checkWire(st.client.Call(ctx, cpiv2.MethodDetachDisk, mainVM, mainVM, ghostDisk))
		})

		It(ClauseText(ClauseKnownTypes), labels("errors", cpiv2.MethodDeleteVM, cpiv2.MethodDetachDisk, cpiv2.MethodAttachDisk, cpiv2.MethodSetVMMetadata), func(ctx SpecContext) {
			for _, x := range []*Exchange{
				st.client.Call(ctx, cpiv2.MethodDeleteVM, "", ghostVM),
				st.client.Call(ctx, cpiv2.MethodDetachDisk, mainVM, mainVM, ghostDisk),
				st.client.Call(ctx, cpiv2.MethodAttachDisk, mainVM, mainVM, ghostDisk),
				st.client.Call(ctx, cpiv2.MethodSetVMMetadata, ghostVM, ghostVM, map[string]string{"k": "v"}),
			} {
				checkWire(x)
				if e := x.Response.Error; e != nil && !e.Type.Known() {
					violate(violation(ClauseKnownTypes, fmt.Sprintf("%s returned error type %q, which the Director treats as unknown", x.Method, e.Type), x))
				}
			}
		})

		It(ClauseText(ClauseRebootVM), labels("shapes", cpiv2.MethodCreateVM, cpiv2.MethodRebootVM, cpiv2.MethodHasVM), func(ctx SpecContext) {
			t := st.tracker()
			v := st.createVM(ctx, t, stemcell, cc.Stemcell)
			boots := st.boots(ctx, v.CID)
			x := st.client.Call(ctx, cpiv2.MethodRebootVM, v.CID, v.CID)
			skipIfNotImplemented(x)
			mustUnread(x, ClauseRebootVM)
			if ok, hx := st.callBool(ctx, ClauseRebootVM, cpiv2.MethodHasVM, v.CID); !ok {
				violate(violation(ClauseRebootVM, "has_vm returned false after reboot_vm", hx))
			}
			// The Director's cloud check reboots a VM whose agent does not
			// answer and then waits for the agent: a reboot_vm that does
			// not reboot leaves it unresponsive.
			if after := st.boots(ctx, v.CID); boots > 0 && after <= boots {
				violate(violation(ClauseRebootVM, fmt.Sprintf("reboot_vm of %s succeeded, but the IaaS did not boot the VM again (booted %d time(s) before, %d after)", v.CID, boots, after), x))
			}
		})

		It(ClauseText(ClauseVMMetadata), labels("shapes", cpiv2.MethodSetVMMetadata), func(ctx SpecContext) {
			x := st.client.Call(ctx, cpiv2.MethodSetVMMetadata, mainVM, mainVM, map[string]string{"deployment": st.names.next("dep")})
			skipIfNotImplemented(x)
			mustUnread(x, ClauseVMMetadata)
		})

		It(ClauseText(ClauseVMMetadata)+" (IaaS state)", labels("iaas", cpiv2.MethodSetVMMetadata), capOracle, func(ctx SpecContext) {
			o := st.oracle()
			if why := fixedMetadata(o); why != "" {
				skipWith("not applicable: " + why)
			}
			want := map[string]string{"deployment": st.names.next("dep"), "job": "cpilab", "index": "0"}
			x := st.client.Call(ctx, cpiv2.MethodSetVMMetadata, mainVM, mainVM, want)
			skipIfNotImplemented(x)
			mustUnread(x, ClauseVMMetadata)
			ov, ok, err := o.VM(ctx, mainVM)
			if err != nil || !ok {
				violate(violation(ClauseVMMetadata, fmt.Sprintf("the IaaS has no VM %s (oracle: %v)", mainVM, err), x))
			}
			for k, v := range want {
				if ov.Metadata[k] != v {
					violate(violation(ClauseVMMetadata, fmt.Sprintf("set_vm_metadata succeeded but the IaaS has %s=%q, want %q (IaaS metadata: %v)", k, ov.Metadata[k], v, ov.Metadata), x))
				}
			}
		})

		It(ClauseText(ClauseDiskMetadata)+" (IaaS state)", labels("iaas", cpiv2.MethodCreateDisk, cpiv2.MethodSetDiskMetadata), capOracle, func(ctx SpecContext) {
			o := st.oracle()
			if why := fixedMetadata(o); why != "" {
				skipWith("not applicable: " + why)
			}
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
			want := map[string]string{"disk_name": st.names.next("disk")}
			x := st.client.Call(ctx, cpiv2.MethodSetDiskMetadata, "", d, want)
			skipIfNotImplemented(x)
			mustUnread(x, ClauseDiskMetadata)
			od, ok, err := o.Disk(ctx, d)
			if err != nil || !ok || od.Metadata["disk_name"] != want["disk_name"] {
				violate(violation(ClauseDiskMetadata, fmt.Sprintf("set_disk_metadata succeeded but the IaaS has metadata %v (oracle: %v)", od.Metadata, err), x))
			}
		})

		It(ClauseText(ClauseCalculate), labels("shapes", cpiv2.MethodCalculateVMCloudProperties), func(ctx SpecContext) {
			x := st.client.Call(ctx, cpiv2.MethodCalculateVMCloudProperties, "", map[string]int{"cpu": 2, "ram": 2048, "ephemeral_disk_size": 4096})
			skipIfNotImplemented(x)
			mustOK(x, ClauseCalculate)
			var m map[string]any
			if err := jsonUnmarshal(x.Response.Result, &m); err != nil || m == nil {
				violate(violation(ClauseCalculate, fmt.Sprintf("returned %s, not a hash", excerpt(x.Response.Result)), x))
			}
		})

		if cc.Thorough {
			// What the VM gets does not depend on the caller profile: one
			// context per api_version family checks it.
			It(ClauseText(ClauseVMResources), labels("iaas", cpiv2.MethodCalculateVMCloudProperties, cpiv2.MethodCreateVM), capOracle, func(ctx SpecContext) {
				st.checkVMResources(ctx, stemcell, cc.Stemcell)
			})
		}

		It(ClauseText(ClauseResize), labels("iaas", cpiv2.MethodCreateDisk, cpiv2.MethodResizeDisk), func(ctx SpecContext) {
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
			// No multiple of a GiB, as for create_disk: a cloud may round
			// it up to the next GiB, never down.
			size := st.cfg.Env.ResizeToMiB + 3
			x := st.client.Call(ctx, cpiv2.MethodResizeDisk, "", d, size)
			skipIfNotSupported(x, "resize_disk")
			mustUnread(x, ClauseResize)
			if st.cfg.Oracle == nil {
				notChecked("resize_disk succeeded; the new size is not checked: no oracle")
			}
			od, ok, err := st.cfg.Oracle.Disk(ctx, d)
			if err != nil || !ok || od.SizeMiB < size || od.SizeMiB > roundUpGiB(size) {
				violate(violation(ClauseResize, fmt.Sprintf("resize_disk to %d MiB succeeded but the IaaS disk is %d MiB (oracle: %v)", size, od.SizeMiB, err), x))
			}
		})

		It(ClauseText(ClauseUpdateDisk), labels("iaas", cpiv2.MethodCreateDisk, cpiv2.MethodUpdateDisk), func(ctx SpecContext) {
			if st.client.APIVersion < 2 {
				skipWith("not applicable: update_disk exists from api_version 2")
			}
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
			size := st.cfg.Env.ResizeToMiB + 3 // no multiple of a GiB, as for resize_disk
			x := st.client.Call(ctx, cpiv2.MethodUpdateDisk, "", d, size, st.cfg.Env.DiskCloudProperties)
			skipIfNotSupported(x, "update_disk")
			mustOK(x, ClauseUpdateDisk)
			cur := d
			if string(x.Response.Result) != "null" {
				nd, err := decodeCID[cpiv2.DiskKind](x.Response.Result)
				if err != nil {
					violate(violation(ClauseUpdateDisk, "update_disk must return a disk_cid or null: "+err.Error(), x))
				}
				if nd != d {
					t.Add(Resource{Kind: KindDisk, CID: nd})
					cur = nd
				}
			}
			if st.cfg.Oracle == nil {
				notChecked("update_disk answered; the new size is not checked: no oracle")
			}
			od, ok, err := st.cfg.Oracle.Disk(ctx, cur)
			if err != nil || !ok || od.SizeMiB < size || od.SizeMiB > roundUpGiB(size) {
				violate(violation(ClauseUpdateDisk, fmt.Sprintf("update_disk to %d MiB answered but the IaaS disk %s is %d MiB (oracle: %v)", size, cur, od.SizeMiB, err), x))
			}
		})

		snapMethods := []string{cpiv2.MethodCreateDisk, cpiv2.MethodSnapshotDisk, cpiv2.MethodDeleteSnapshot}
		snapText := ""
		if cc.Thorough {
			snapMethods = append(snapMethods, cpiv2.MethodCreateVM, cpiv2.MethodAttachDisk)
			snapText = " (the second of two disks on one VM)"
		}
		It(ClauseText(ClauseSnapshot)+snapText, labels("iaas", snapMethods...), func(ctx SpecContext) {
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
			if cc.Thorough {
				// The Director snapshots an instance's disks while they
				// are attached: a CPI that snapshots the first disk it
				// finds on the VM, not the one it was given, shows here.
				// A VM of its own: the spec must not depend on what
				// earlier specs did to the context's VM.
				v := st.createVM(ctx, t, stemcell, cc.Stemcell).CID
				other := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
				st.attach(ctx, t, v, other)
				st.attach(ctx, t, v, d)
			}
			sc, x := st.snapshot(ctx, t, d)
			if st.cfg.Oracle != nil && !slices.Contains(st.inventory(ctx).Snapshots, sc) {
				violate(violation(ClauseSnapshot, fmt.Sprintf("snapshot_disk returned %s, but the IaaS has no such snapshot", sc), x))
			}
			st.checkSnapshotSource(ctx, sc, d, x)
			dx := st.client.Call(ctx, cpiv2.MethodDeleteSnapshot, "", sc)
			mustUnread(dx, ClauseSnapshot)
			t.Forget(Resource{Kind: KindSnapshot, CID: sc})
			if st.cfg.Oracle != nil {
				inv := st.inventory(ctx)
				if slices.Contains(inv.Snapshots, sc) {
					violate(violation(ClauseSnapshot, fmt.Sprintf("delete_snapshot of %s succeeded, but the IaaS still has it", sc), dx))
				}
				// The Director deletes a snapshot and keeps its disk.
				if !slices.Contains(inv.Disks, d) {
					violate(violation(ClauseSnapshot, fmt.Sprintf("delete_snapshot of %s also deleted disk %s, the disk it was taken of", sc, d), dx))
				}
			}
		})

		It(ClauseText(ClauseDeleteSnapshot), labels("errors", cpiv2.MethodCreateDisk, cpiv2.MethodSnapshotDisk, cpiv2.MethodDeleteSnapshot), func(ctx SpecContext) {
			t := st.tracker()
			d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
			sc, _ := st.snapshot(ctx, t, d)
			mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteSnapshot, "", sc), ClauseSnapshot)
			t.Forget(Resource{Kind: KindSnapshot, CID: sc})
			x := st.client.Call(ctx, cpiv2.MethodDeleteSnapshot, "", sc)
			checkWire(x)
			if e := x.Response.Error; e != nil && e.Type != cpiv2.TypeDiskNotFound {
				violate(violation(ClauseDeleteSnapshot, fmt.Sprintf("delete_snapshot of deleted snapshot %s returned %s: %q (the Director's orphan clean-up tolerates only success or DiskNotFound)", sc, e.Type, e.Message), x))
			}
		})

		It(ClauseText(ClauseDeleteVMDisks), labels("iaas", cpiv2.MethodCreateVM, cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodDeleteVM, cpiv2.MethodHasDisk), func(ctx SpecContext) {
			st.checkDeleteVMKeepsDisks(ctx, stemcell, cc.Stemcell, false)
		})

		if cc.Thorough {
			It(ClauseText(ClauseDeleteVMDisks)+" (data read back on another VM)", labels("data", cpiv2.MethodCreateVM, cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodDeleteVM, cpiv2.MethodHasDisk), capOracle, Label("cap:ssh"), func(ctx SpecContext) {
				st.checkDeleteVMKeepsDisks(ctx, stemcell, cc.Stemcell, true)
			})

			It(ClauseText(ClauseParallel), labels("parallel", cpiv2.MethodCreateDisk, cpiv2.MethodDeleteDisk, cpiv2.MethodHasDisk), func(ctx SpecContext) {
				st.checkParallel(ctx)
			})
		}

		It(ClauseText(ClauseRetry), labels("retry", cpiv2.MethodCreateVM), Label("cap:faults"), func(ctx SpecContext) {
			st.checkRetry(ctx, stemcell, cc.Stemcell)
		})

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

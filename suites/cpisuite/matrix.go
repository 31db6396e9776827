package cpisuite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/cpilab/cpilab/suites"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// Row is one row of the reference table (docs/contracts.md): a caller profile, the
// CPI's api_version (set through debug.cpi.api_version) and the stemcell's,
// with what the table says must happen.
type Row struct {
	// Name is the row name in the summary and the "row:" label value.
	Name     string
	Profile  cpiv2.Profile
	CPI      int // debug.cpi.api_version
	Stemcell int // the stemcell's api_version
	// Registry: the CPI updates the registry. UserData: the agent settings
	// are in the IaaS user-data (and the agent reads them there).
	Registry, UserData bool
	// Refused: the caller refuses the CPI (the current Director, CPI 1).
	Refused bool
	// FailsClearly: create_vm must fail with a clear error (stemcell 1 with
	// no registry).
	FailsClearly bool
	// Resolver is the agent's device resolver on the row's stemcell
	// ("identity", "mapped", "virtio", "scsi"; "" for the environment's
	// default stemcells). With identity and mapped (and scsi given a SCSI
	// hint) only the hint leads the agent to the disk.
	Resolver string
}

// ReferenceTable is every row of the reference table: the 8 historic rows, the
// current Director's rows and the bosh CLI's.
var ReferenceTable = []Row{
	{Name: "d1.c1.s1", Profile: cpiv2.ProfileDirectorV1, CPI: 1, Stemcell: 1, Registry: true, Resolver: "identity"},
	{Name: "d1.c1.s2", Profile: cpiv2.ProfileDirectorV1, CPI: 1, Stemcell: 2, Registry: true, Resolver: "mapped"},
	{Name: "d1.c2.s2", Profile: cpiv2.ProfileDirectorV1, CPI: 2, Stemcell: 2, Registry: true, Resolver: "scsi"},
	{Name: "d2.c2.s2", Profile: cpiv2.ProfileDirectorV2, CPI: 2, Stemcell: 2, UserData: true, Resolver: "virtio"},
	{Name: "d1.c2.s1", Profile: cpiv2.ProfileDirectorV1, CPI: 2, Stemcell: 1, Registry: true, Resolver: "mapped"},
	{Name: "d2.c2.s1", Profile: cpiv2.ProfileDirectorV2, CPI: 2, Stemcell: 1, Registry: true, Resolver: "identity"},
	{Name: "d2.c1.s1", Profile: cpiv2.ProfileDirectorV2, CPI: 1, Stemcell: 1, Registry: true, Resolver: "scsi"},
	{Name: "d2.c1.s2", Profile: cpiv2.ProfileDirectorV2, CPI: 1, Stemcell: 2, Registry: true, Resolver: "identity"},
	{Name: "current.c2.s2", Profile: cpiv2.ProfileDirectorCurrent, CPI: 2, Stemcell: 2, UserData: true, Resolver: "mapped"},
	{Name: "current.c3.s2", Profile: cpiv2.ProfileDirectorCurrent, CPI: 3, Stemcell: 2, UserData: true, Resolver: "scsi"},
	{Name: "current.c1.s2", Profile: cpiv2.ProfileDirectorCurrent, CPI: 1, Stemcell: 2, Refused: true},
	{Name: "current.c3.s1", Profile: cpiv2.ProfileDirectorCurrent, CPI: 3, Stemcell: 1, FailsClearly: true},
	{Name: "cli.c2.s2", Profile: cpiv2.ProfileCLI, CPI: 2, Stemcell: 2, UserData: true, Resolver: "identity"},
	{Name: "cli.c1.s1", Profile: cpiv2.ProfileCLI, CPI: 1, Stemcell: 1, Registry: true, Resolver: "virtio"},
}

// Switch is the CPI setup the row needs.
func (r Row) Switch() Switch {
	return Switch{APIVersionCap: r.CPI, NoRegistry: !hasRegistry(r.Profile)}
}

// apiVersion is the api_version the row negotiates (0 when refused).
func (r Row) apiVersion() int {
	v, _ := negotiate(r.Profile, r.CPI)
	return v
}

func describeMatrix(cfg *Config) {
	Describe("Reference table", Label("suite:matrix"), func() {
		for _, r := range cfg.withDefaults().Rows {
			matrixRow(cfg, r)
		}
	})
}

// rowRun is the state one row's steps share.
type rowRun struct {
	st         *state
	r          Row
	refusal    error
	stemcell   string
	vm1, vm2   vm
	disk       string
	hint       json.RawMessage // as attach_disk returned it (or the registry had it)
	agentReady map[string]bool
	linked     bool   // step 4 made the dynamic disk link on vm1
	target     string // the link's target on vm1
	marker     []byte
}

const markerOffset = 1 << 20

func matrixRow(cfg *Config, r Row) {
	rr := &rowRun{r: r, st: &state{profile: r.Profile, sw: r.Switch()}, agentReady: map[string]bool{}}
	api := fmt.Sprintf("api:%d", r.apiVersion())
	if r.Refused {
		api = "api:refused"
	}
	lbl := Label("row:"+r.Name, "profile:"+r.Profile.Name, api, suites.LabelSteps,
		fmt.Sprintf("cpi:%d", r.CPI), fmt.Sprintf("stemcell:%d", r.Stemcell))
	title := fmt.Sprintf("%s: %s, CPI %d, stemcell %d", r.Name, r.Profile.Name, r.CPI, r.Stemcell)
	if r.Resolver != "" {
		lbl = append(lbl, "resolver:"+r.Resolver)
		title += ", " + r.Resolver + " resolver"
	}
	Context(title, lbl, Ordered, ContinueOnFailure, func() {
		BeforeAll(func() {
			st := rr.st
			st.cfg = cfg.withDefaults()
			st.name = "row " + r.Name
			st.names = &names{prefix: st.cfg.RunID + "-" + strings.ReplaceAll(r.Name, ".", "-")}
			st.useResolver(r.Resolver)
			st.setup = func(ctx SpecContext) {
				if _, st.skip = st.stemcellFor(r.Stemcell); st.skip != "" {
					return
				}
				st.takeInventory(ctx)
				rr.refusal, st.skip = st.connect(ctx, true)
			}
		})
		BeforeEach(func(ctx SpecContext) { rr.st.beforeSpec(ctx) })
		AfterAll(func() { rr.st.afterContainer() })

		It(ClauseText(ClauseSetup), labels("setup", cpiv2.MethodInfo), func(ctx SpecContext) {
			rr.st.ensureSetup(ctx)
			rr.st.skipIfSkipped()
		})
		defer func() {
			It(ClauseText(ClauseTeardown), labels("cleanup", rr.teardownMethods()...), func(ctx SpecContext) { rr.st.teardown(ctx) })
			It(ClauseText(ClauseNoLeak), labels("cleanup"), func(ctx SpecContext) { rr.st.checkNoLeak(ctx) })
		}()

		if r.Refused {
			rr.refusedSpec()
			return
		}

		if r.FailsClearly {
			rr.noRegistrySpec()
			return
		}

		rr.vmSpecs()
		rr.diskSpecs()
	})
}

// refusedSpec registers the one spec of a row the caller refuses: the
// refusal must say why.
func (rr *rowRun) refusedSpec() {
	r := rr.r
	It(ClauseText(ClauseRefused), labels("settings"), func(ctx SpecContext) {
		if !errors.Is(rr.refusal, ErrRefused) {
			violate(violation(ClauseRefused, fmt.Sprintf("with debug.cpi.api_version %d the CPI's info reports api_version %d, which the %s caller accepts", r.CPI, rr.st.client.CPIMax, r.Profile.Name), nil))
		}
		if !strings.Contains(rr.refusal.Error(), "api_version") {
			Fail("the refusal does not say why: " + rr.refusal.Error())
		}
		AddReportEntry("refusal", rr.refusal.Error())
	})
}

// noRegistrySpec registers the one spec of a row whose create_vm must fail
// clearly (a stemcell 1 agent and no registry).
func (rr *rowRun) noRegistrySpec() {
	r := rr.r
	It(ClauseText(ClauseNoRegistry), labels("vm", cpiv2.MethodCreateStemcell, cpiv2.MethodCreateVM), func(ctx SpecContext) {
		rr.skipIfRefused()
		st := rr.st
		rr.stemcell = st.createStemcell(ctx, st.shared, r.Stemcell)
		// Retried as the Director does: a transient failure is not
		// the clear refusal this row needs.
		x := st.createVMAsDirector(ctx, VMRequest{AgentID: st.names.next("agent"), StemcellCID: rr.stemcell,
			StemcellAPIVersion: r.Stemcell, CloudProperties: st.cfg.Env.VMCloudProperties, Networks: st.cfg.Env.Networks})
		e := x.Response.Error
		if e == nil {
			if cid := salvageCID(x.Response.Result); cid != "" {
				st.shared.Add(Resource{Kind: KindVM, CID: cid})
			}
			violate(violation(ClauseNoRegistry, "create_vm succeeded: the stemcell 1 agent can only read the registry, and there is none", x))
		}
		if !e.Type.Known() || strings.TrimSpace(e.Message) == "" {
			violate(violation(ClauseNoRegistry, fmt.Sprintf("create_vm failed with %s: %q, not a known error type with a message", e.Type, e.Message), x))
		}
	})
}

// vmSpecs registers steps 1 and 2 of a row: create_vm, and the agent
// settings where the reference table puts them.
func (rr *rowRun) vmSpecs() {
	r := rr.r
	It(ClauseText(ClauseCreateVM)+" (step 1: stemcell upload, then create_vm)", labels("vm", cpiv2.MethodCreateStemcell, cpiv2.MethodCreateVM), func(ctx SpecContext) {
		rr.skipIfRefused()
		st := rr.st
		rr.stemcell = st.createStemcell(ctx, st.shared, r.Stemcell)
		rr.vm1 = st.createVM(ctx, st.shared, rr.stemcell, r.Stemcell)
	})

	It(ClauseText(ClauseTableRegistry)+" (step 2)", labels("settings"), capOracle, func(ctx SpecContext) {
		o := rr.needVM1()
		s, err := o.Settings(ctx, rr.vm1.CID)
		if err != nil {
			Fail(fmt.Sprintf("oracle settings: %v", err))
		}
		settingsInVM(s)
		switch {
		case r.Registry && s.Registry == nil:
			violate(violation(ClauseTableRegistry, fmt.Sprintf("row %s: the registry must hold the settings of %s, it holds none", r.Name, rr.vm1.CID), rr.vm1.X))
		case r.Registry && agentIDOf(s.Registry) != rr.vm1.AgentID:
			violate(violation(ClauseTableRegistry, fmt.Sprintf("row %s: the registry settings name agent %q, want %q", r.Name, agentIDOf(s.Registry), rr.vm1.AgentID), rr.vm1.X))
		case !r.Registry && (s.Registry != nil || s.RegistryWrites > 0):
			violate(violation(ClauseTableRegistry, fmt.Sprintf("row %s: the registry must not be updated, it was (%d writes, settings %s)", r.Name, s.RegistryWrites, excerpt(s.Registry)), rr.vm1.X))
		}
	})

	It(ClauseText(ClauseTableUserData)+" (step 2)", labels("settings"), capOracle, func(ctx SpecContext) {
		o := rr.needVM1()
		s, err := o.Settings(ctx, rr.vm1.CID)
		if err != nil {
			Fail(fmt.Sprintf("oracle settings: %v", err))
		}
		settingsInVM(s)
		got := agentIDOf(s.UserData)
		switch {
		case r.UserData && got != rr.vm1.AgentID:
			violate(violation(ClauseTableUserData, fmt.Sprintf("row %s: user-data must hold the full settings for agent %q, it is %s", r.Name, rr.vm1.AgentID, excerpt(s.UserData)), rr.vm1.X))
		case !r.UserData && got != "":
			violate(violation(ClauseTableUserData, fmt.Sprintf("row %s: user-data must not hold the agent settings (the agent cannot use them here), it is %s", r.Name, excerpt(s.UserData)), rr.vm1.X))
		}
	})
}

// diskSpecs registers steps 3 to 6 of a row: the agent answers,
// attach_disk and the agent's link, the data read back on a second VM.
func (rr *rowRun) diskSpecs() {
	r := rr.r
	It(ClauseText(ClauseAgentPing)+" (step 3)", labels("agent"), Label("cap:agent"), func(ctx SpecContext) {
		rr.needVM1()
		rr.ping(ctx, rr.vm1)
	})

	It(ClauseText(ClauseAgentDisk)+" (step 4: after attach_disk)", labels("disks", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk), Label("cap:agent"), func(ctx SpecContext) {
		rr.needVM1()
		st := rr.st
		rr.disk = st.createDisk(ctx, st.shared, st.cfg.Env.DiskSizeMiB, rr.vm1.CID)
		rr.hint = rr.attachAndResolve(ctx, rr.vm1)
		rr.linked = true
	})

	It(ClauseText(ClauseSymlink)+" (step 5: checked over SFTP)", labels("disks"), Label("cap:ssh", "cap:agent"), func(ctx SpecContext) {
		rr.needLinked()
		fs := rr.open(ctx, rr.vm1)
		defer fs.Close()
		rr.target = rr.readLink(fs, rr.vm1)
		AddReportEntry("dynamic disk link", fmt.Sprintf("%s on %s → %s", rr.disk, rr.vm1.CID, rr.target))
		if o := rr.st.cfg.Oracle; o != nil {
			od, ok, err := o.Disk(ctx, rr.disk)
			if err != nil || !ok {
				Fail(fmt.Sprintf("oracle disk %s: ok=%v err=%v", rr.disk, ok, err))
			}
			wantDev := path.Base(rr.target) == od.Device
			if od.Path != "" { // a directory disk: the link leads to its bind directory
				wantDev = rr.target == od.Path
			}
			if od.AttachedTo != rr.vm1.CID || !wantDev {
				violate(violation(ClauseSymlink, fmt.Sprintf("the link on %s leads to %s, but the IaaS attached %s as %q on %q", rr.vm1.CID, rr.target, rr.disk, od.Device, od.AttachedTo), nil))
			}
		}
	})

	It(ClauseText(ClauseDataMoves)+" (step 6)", labels("data", cpiv2.MethodDetachDisk, cpiv2.MethodCreateVM, cpiv2.MethodAttachDisk), Label("cap:ssh", "cap:agent"), func(ctx SpecContext) {
		rr.needLinked()
		st := rr.st
		if rr.target == "" {
			notChecked("step 5 did not find the link on the first VM")
		}
		rr.marker = []byte(st.names.next("marker") + "\n")
		file, off := rr.markerFile(ctx, rr.target)
		fs := rr.open(ctx, rr.vm1)
		if err := fs.WriteAt(file, rr.marker, off); err != nil {
			fs.Close()
			Fail(fmt.Sprintf("writing through %s on %s over SFTP: %v", rr.target, rr.vm1.CID, err))
		}
		fs.Close()
		rr.agentRelease(ctx, rr.vm1)
		st.detach(ctx, st.shared, rr.vm1.CID, rr.disk)
		rr.vm2 = st.createVM(ctx, st.shared, rr.stemcell, r.Stemcell)
		rr.ping(ctx, rr.vm2)
		rr.attachAndResolve(ctx, rr.vm2)
		fs2 := rr.open(ctx, rr.vm2)
		defer fs2.Close()
		target2 := rr.readLink(fs2, rr.vm2)
		file2, off2 := rr.markerFile(ctx, target2)
		got, err := fs2.ReadAt(file2, len(rr.marker), off2)
		if err != nil {
			Fail(fmt.Sprintf("reading %s on %s over SFTP: %v", target2, rr.vm2.CID, err))
		}
		if string(got) != string(rr.marker) {
			violate(violation(ClauseDataMoves, fmt.Sprintf("wrote %q through %s on %s; after detach and attach %s on %s reads %q", rr.marker, rr.target, rr.vm1.CID, target2, rr.vm2.CID, got), nil))
		}
	})
}

// markerFile is where step 6 writes its marker through the link target:
// the device itself at markerOffset, or, for a directory disk (the
// oracle's OracleDisk.Path), a file inside the directory.
func (rr *rowRun) markerFile(ctx context.Context, target string) (string, int64) {
	if o := rr.st.cfg.Oracle; o != nil {
		if od, ok, err := o.Disk(ctx, rr.disk); err == nil && ok && od.Path != "" {
			return path.Join(target, "cpilab-marker"), 0
		}
	}
	return target, markerOffset
}

func (rr *rowRun) skipIfRefused() {
	GinkgoHelper()
	if rr.refusal != nil {
		notChecked(rr.refusal.Error())
	}
}

// needVM1 skips unless step 1 made a VM, and returns the oracle when the
// spec needs one (nil when absent).
func (rr *rowRun) needVM1() Oracle {
	GinkgoHelper()
	if rr.vm1.CID == "" {
		notChecked("step 1 made no VM")
	}
	return rr.st.cfg.Oracle
}

func (rr *rowRun) needLinked() {
	GinkgoHelper()
	rr.needVM1()
	if rr.st.cfg.Files == nil {
		notChecked("no SSH/SFTP access to VMs is configured")
	}
	if !rr.linked {
		notChecked("step 4 did not set up the dynamic disk link")
	}
}

func (rr *rowRun) agents() Agents {
	GinkgoHelper()
	if rr.st.cfg.Agents == nil {
		notChecked("no mbus access to agents is configured")
	}
	return rr.st.cfg.Agents
}

// ping waits for v's agent.
func (rr *rowRun) ping(ctx context.Context, v vm) {
	GinkgoHelper()
	a := rr.agents()
	if rr.agentReady[v.CID] {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, rr.st.cfg.Timeouts.Agent)
	defer cancel()
	if err := a.Ping(pctx, v.AgentID); err != nil {
		if errors.Is(err, ErrNotHosted) {
			notChecked(err.Error())
		}
		violate(violation(ClauseAgentPing, fmt.Sprintf("the agent %s on %s did not answer ping within %s: %v (it boots from the settings the CPI wrote)", v.AgentID, v.CID, rr.st.cfg.Timeouts.Agent, err), v.X))
	}
	rr.agentReady[v.CID] = true
}

// attachAndResolve attaches rr.disk to v and has v's agent resolve the hint
// as the Director does; it returns the hint used.
func (rr *rowRun) attachAndResolve(ctx context.Context, v vm) json.RawMessage {
	GinkgoHelper()
	st := rr.st
	a := rr.agents()
	rr.ping(ctx, v)
	_, x := st.attach(ctx, st.shared, v.CID, rr.disk)
	// The Director waits for the agent after attach_disk before it talks
	// to it (attach_disk_step.rb, mount_disk_step.rb: wait_until_ready): a
	// CPI may restart the VM to attach (the Docker CPI recreates it).
	delete(rr.agentReady, v.CID)
	rr.ping(ctx, v)
	hint := x.Response.Result
	if st.client.APIVersion < 2 {
		// At api_version 1 the hint reaches the agent through the registry
		// settings (disks.persistent), as a v1 agent reads it, or through
		// the settings file a CPI writes into the VM.
		if st.cfg.Oracle == nil {
			notChecked("at api_version 1 the hint is in the registry, which cannot be read without an oracle")
		}
		s, err := st.cfg.Oracle.Settings(ctx, v.CID)
		if err != nil {
			Fail(fmt.Sprintf("oracle settings: %v", err))
		}
		where, settings := "the registry settings", s.Registry
		if s.InVM != "" {
			where, settings = s.InVM, s.File
		}
		var set struct {
			Disks struct {
				Persistent map[string]json.RawMessage `json:"persistent"`
			} `json:"disks"`
		}
		_ = json.Unmarshal(settings, &set)
		h, ok := set.Disks.Persistent[rr.disk]
		if !ok {
			violate(violation(ClauseAgentDisk, fmt.Sprintf("at api_version 1 attach_disk must record the disk in %s (disks.persistent), they are %s", where, excerpt(settings)), x))
		}
		hint = h
	}
	if o := st.cfg.Oracle; o != nil {
		var h cpiv2.DiskHint
		od, ok, err := o.Disk(ctx, rr.disk)
		if err != nil || !ok {
			Fail(fmt.Sprintf("oracle disk %s: ok=%v err=%v", rr.disk, ok, err))
		}
		if h.UnmarshalJSON(hint) == nil {
			if _, wrong := hintNames(h, od, rr.disk); wrong != "" {
				violate(violation(ClauseHintDevice, fmt.Sprintf("row %s: the hint %s for disk %s does not name the device the IaaS attached it as (%s, LUN %d on %s): %s", rr.r.Name, hint, rr.disk, od.Device, od.LUN, v.CID, wrong), x))
			}
		}
	}
	actx, cancel := context.WithTimeout(ctx, rr.st.cfg.Timeouts.Agent)
	defer cancel()
	for _, step := range []struct {
		method string
		args   []any
	}{
		{"add_persistent_disk", []any{rr.disk, hint}},
		{"mount_disk", []any{rr.disk}},
		{"add_dynamic_disk", []any{rr.disk, hint}},
	} {
		if _, err := a.Run(actx, v.AgentID, step.method, step.args...); err != nil {
			if errors.Is(err, ErrNotHosted) {
				notChecked(err.Error())
			}
			violate(violation(ClauseAgentDisk, fmt.Sprintf("agent %s: %s(%s, %s) failed: %v", v.AgentID, step.method, rr.disk, hint, err), x))
		}
	}
	return hint
}

// agentRelease undoes attachAndResolve on v's agent before the detach.
func (rr *rowRun) agentRelease(ctx context.Context, v vm) {
	GinkgoHelper()
	a := rr.agents()
	actx, cancel := context.WithTimeout(ctx, rr.st.cfg.Timeouts.Agent)
	defer cancel()
	for _, m := range []string{"remove_dynamic_disk", "unmount_disk", "remove_persistent_disk"} {
		if _, err := a.Run(actx, v.AgentID, m, rr.disk); err != nil {
			if errors.Is(err, ErrNotHosted) {
				notChecked(err.Error())
			}
			violate(violation(ClauseAgentDisk, fmt.Sprintf("agent %s: %s(%s) failed: %v", v.AgentID, m, rr.disk, err), nil))
		}
	}
}

func (rr *rowRun) open(ctx context.Context, v vm) VMFS {
	GinkgoHelper()
	fs, err := rr.st.cfg.Files.Open(ctx, VMAccess{VMCID: v.CID, AgentID: v.AgentID, IP: v.IP})
	if err != nil {
		Fail(fmt.Sprintf("opening %s over SFTP: %v", v.CID, err))
	}
	return fs
}

// readLink reads the dynamic disk link on v and returns the device it
// finally leads to, following further links (a /dev/disk/by-id name) as the
// VM would.
func (rr *rowRun) readLink(fs VMFS, v vm) string {
	GinkgoHelper()
	link := "/var/vcap/data/dynamic_disks/" + rr.disk
	target, err := fs.Readlink(link)
	if err != nil {
		violate(violation(ClauseSymlink, fmt.Sprintf("reading %s on %s: %v", link, v.CID, err), nil))
	}
	for hops := 0; ; hops++ {
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(link), target)
		}
		next, err := fs.Readlink(target)
		if err != nil {
			return target // not a link: the device itself
		}
		if hops == 8 {
			violate(violation(ClauseSymlink, fmt.Sprintf("%s on %s: more than 8 levels of links", link, v.CID), nil))
		}
		link, target = target, next
	}
}

// teardownMethods are what the row's teardown deletes.
func (rr *rowRun) teardownMethods() []string {
	switch {
	case rr.r.Refused:
		return nil
	case rr.r.FailsClearly:
		return []string{cpiv2.MethodDeleteStemcell}
	}
	return []string{cpiv2.MethodDetachDisk, cpiv2.MethodDeleteVM, cpiv2.MethodDeleteDisk, cpiv2.MethodDeleteStemcell}
}

// settingsInVM skips a settings step for a CPI that writes the agent
// settings into the VM itself (a file: the Warden and Docker CPIs): the
// registry and user-data of the reference table do not apply to it. The
// agent steps still check that the agent booted from that file.
func settingsInVM(s OracleSettings) {
	GinkgoHelper()
	if s.InVM != "" {
		notChecked(fmt.Sprintf("the CPI writes the agent settings into the VM (%s), neither into a registry nor into user-data; the agent steps check it boots from them", s.InVM))
	}
}

// agentIDOf returns the agent_id of a settings document ("" when none).
func agentIDOf(settings json.RawMessage) string {
	var s struct {
		AgentID string `json:"agent_id"`
	}
	if len(settings) == 0 || json.Unmarshal(settings, &s) != nil {
		return ""
	}
	return s.AgentID
}

package explore

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"pgregory.net/rapid"
)

// Profiles are the caller profiles a lifecycle runs under.
var Profiles = []string{"director-current", "director-v2", "cli", "director-v1"}

// methods are the calls a lifecycle draws, most often the ones that move
// disks about.
var methods = []string{
	"attach_disk", "detach_disk", "create_disk", "create_vm", "delete_vm", "reboot_vm",
	"attach_disk", "detach_disk", "set_vm_metadata", "set_disk_metadata", "get_disks", "has_vm", "has_disk",
	"resize_disk", "update_disk", "snapshot_disk", "delete_snapshot", "delete_disk", "create_stemcell",
	"delete_stemcell", "info", "calculate_vm_cloud_properties",
	"reboot_vm", "resize_disk", "delete_disk", "detach_disk", "attach_disk", "create_disk",
}

var sizes = []int{1024, 2048, 1, 512, 1025, 3000, 4096, 10240}

var metadata = []map[string]string{
	{"director": "cpilab", "deployment": "explore", "name": "job/0", "index": "0"},
	{"job": "db", "id": "6f3c"},
	{"Name": "Job Upper Case", "created_by": "cpilab"},
	{},
}

// gen draws a lifecycle: it counts what the steps so far create, so that
// references name those objects (or, now and then, one that never
// existed).
type gen struct {
	env     Env
	profile string
	made    map[string]int
	agents  int
	rng     *rand.Rand
	// attached are the (vm, disk) pairs of the attach_disk steps so far,
	// which detach_disk mostly picks from.
	attached [][]json.RawMessage
}

func (g *gen) ref(t *rapid.T, kind, label string) json.RawMessage {
	// One reference in ten names an object that never existed; the
	// others an object the lifecycle made (which may be gone by now).
	if g.made[kind] == 0 || rapid.IntRange(0, 9).Draw(t, label+" missing") == 9 {
		return raw("$" + kind + ":missing")
	}
	return raw(fmt.Sprintf("$%s:%d", kind, rapid.IntRange(1, g.made[kind]).Draw(t, label)))
}

// otherKind is a reference to an object of kind, or one time in five
// (when the lifecycle made one) to an object of the other kind: a has_*
// call given a CID the cloud has, of another kind.
func (g *gen) otherKind(t *rapid.T, kind, other, label string) json.RawMessage {
	if g.made[other] > 0 && rapid.IntRange(0, 4).Draw(t, label+" other kind") == 4 {
		return g.ref(t, other, label+" "+other)
	}
	return g.ref(t, kind, label+" "+kind)
}

// snapshot is a snapshot_disk step with the metadata a Director sends
// (director, deployment, instance, agent), keys and values no disk has.
func (g *gen) snapshot(disk json.RawMessage) Step {
	g.made["snapshot"]++
	return Step{Method: "snapshot_disk", Profile: g.profile, Args: []json.RawMessage{disk, raw(map[string]string{
		"director_name": "cpilab-explore", "deployment": "explore-snapshots", "instance_id": fmt.Sprintf("snapshot-%d", g.made["snapshot"]),
		"agent_id": "explore-agent", "job": "db", "index": "0"})}}
}

func raw(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func (g *gen) versions() []int {
	var out []int
	for v := range g.env.Stemcells {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

func (g *gen) createStemcell(v int) Step {
	img := g.env.Stemcells[v]
	// The image by reference: a replay file runs on another machine,
	// where the stemcells are elsewhere.
	args := []json.RawMessage{raw(fmt.Sprintf("$image:%d", v)), orEmpty(img.CloudProperties)}
	if apiVersionOf(g.profile, g.env.MaxAPIVersion) >= 3 {
		args = append(args, raw(map[string]any{"tags": map[string]string{"cpilab_run": g.env.RunID, "purpose": "explore"}}))
	}
	g.made["stemcell"]++
	return Step{Method: "create_stemcell", Args: args, Profile: g.profile}
}

func orEmpty(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("{}")
	}
	return r
}

// step draws one step.
func (g *gen) step(t *rapid.T, label string) Step {
	// rapid favours the first values of a range; the lifecycle's own
	// generator (seeded by rapid) spreads the methods evenly.
	m := methods[(rapid.IntRange(0, len(methods)-1).Draw(t, label+" method")+g.rng.IntN(len(methods)))%len(methods)]
	s := Step{Method: m, Profile: g.profile}
	vm := func() json.RawMessage { return g.ref(t, "vm", label+" vm") }
	disk := func() json.RawMessage { return g.ref(t, "disk", label+" disk") }
	switch m {
	case "create_stemcell":
		vs := g.versions()
		return g.createStemcell(rapid.SampledFrom(vs).Draw(t, label+" stemcell api_version"))
	case "delete_stemcell":
		s.Args = []json.RawMessage{g.ref(t, "stemcell", label+" stemcell")}
	case "create_vm":
		g.agents++
		var locality []string
		if g.made["disk"] > 0 && rapid.IntRange(0, 3).Draw(t, label+" with disk_cids") == 3 {
			var l string
			_ = json.Unmarshal(disk(), &l)
			locality = []string{l}
		}
		if locality == nil {
			locality = []string{}
		}
		s.Args = []json.RawMessage{raw(fmt.Sprintf("$agent:%d", g.agents)), g.ref(t, "stemcell", label+" stemcell"),
			orEmpty(g.env.VMCloudProperties), orEmpty(g.env.Networks), raw(locality),
			raw(map[string]any{"bosh": map[string]any{"group": "explore"}})}
		g.made["vm"]++
	case "delete_vm", "reboot_vm", "get_disks":
		s.Args = []json.RawMessage{vm()}
	case "has_vm":
		// Now and then the CID of another kind of object: a disk's.
		s.Args = []json.RawMessage{g.otherKind(t, "vm", "disk", label)}
	case "set_vm_metadata":
		s.Args = []json.RawMessage{vm(), raw(rapid.SampledFrom(metadata).Draw(t, label+" metadata"))}
	case "create_disk":
		var loc json.RawMessage = json.RawMessage("null")
		if g.made["vm"] > 0 && rapid.Bool().Draw(t, label+" locality") {
			loc = vm()
		}
		s.Args = []json.RawMessage{raw(rapid.SampledFrom(sizes).Draw(t, label+" size")), orEmpty(g.env.DiskCloudProperties), loc}
		g.made["disk"]++
	case "snapshot_disk":
		return g.snapshot(disk())
	case "delete_disk":
		s.Args = []json.RawMessage{disk()}
	case "has_disk":
		// Now and then the CID of another kind of object: a snapshot's.
		s.Args = []json.RawMessage{g.otherKind(t, "disk", "snapshot", label)}
	case "attach_disk":
		s.Args = []json.RawMessage{vm(), disk()}
		g.attached = append(g.attached, s.Args)
	case "detach_disk":
		if len(g.attached) > 0 && rapid.IntRange(0, 3).Draw(t, label+" detach any") > 0 {
			s.Args = g.attached[len(g.attached)-1-rapid.IntRange(0, len(g.attached)-1).Draw(t, label+" attachment")]
			break
		}
		s.Args = []json.RawMessage{vm(), disk()}
	case "set_disk_metadata":
		s.Args = []json.RawMessage{disk(), raw(rapid.SampledFrom(metadata).Draw(t, label+" metadata"))}
	case "resize_disk":
		s.Args = []json.RawMessage{disk(), raw(rapid.SampledFrom(sizes).Draw(t, label+" size"))}
	case "update_disk":
		s.Args = []json.RawMessage{disk(), raw(rapid.SampledFrom(sizes).Draw(t, label+" size")), orEmpty(g.env.DiskCloudProperties)}
	case "delete_snapshot":
		s.Args = []json.RawMessage{g.ref(t, "snapshot", label+" snapshot")}
	case "calculate_vm_cloud_properties":
		s.Args = []json.RawMessage{raw(map[string]int{"cpu": 2, "ram": 2048, "ephemeral_disk_size": 4096})}
	case "info":
		s.Args = []json.RawMessage{}
	}
	return s
}

// concurrent draws, now and then, a second step to run at the same time
// as s on other objects of the same kind.
func (g *gen) concurrent(t *rapid.T, s Step, label string) Step {
	switch s.Method {
	case "set_vm_metadata", "has_vm", "get_disks", "reboot_vm":
	case "attach_disk", "detach_disk", "set_disk_metadata", "has_disk", "create_disk":
	default:
		return s
	}
	if rapid.IntRange(0, 5).Draw(t, label+" concurrent") != 5 {
		return s
	}
	saved, agents, attached := maps.Clone(g.made), g.agents, g.attached
	w := g.step(t, label+" with")
	if w.Method != s.Method || len(w.Args) == 0 || len(w.Args) != len(s.Args) {
		g.made, g.agents, g.attached = saved, agents, attached
		return s
	}
	// Distinct objects: every reference differs.
	for i := range w.Args {
		ref := strings.HasPrefix(string(s.Args[i]), `"$`)
		if ref && s.Method != "create_disk" && string(w.Args[i]) == string(s.Args[i]) {
			g.made, g.agents, g.attached = saved, agents, attached
			return s
		}
	}
	s.With = &w
	return s
}

// Draw draws a lifecycle of up to maxSteps steps (after a stemcell of each
// api_version), under one caller profile.
func Draw(t *rapid.T, env Env, maxSteps int) []Step {
	g := &gen{env: env, made: map[string]int{}}
	g.rng = rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "lifecycle seed"), 0))
	g.profile = rapid.SampledFrom(Profiles).Draw(t, "profile")
	var steps []Step
	// A stemcell of each api_version, a VM on the first and the last and
	// a third on the first (two VMs whose agents read the registry when
	// the CPI keeps one), and three disks, the first two made for the
	// first VM (its CID the locality, as the Director gives it): several
	// objects of each kind from the start.
	vs := g.versions()
	for _, v := range vs {
		steps = append(steps, g.createStemcell(v))
	}
	for _, sc := range []int{1, len(vs), 1} {
		g.agents++
		steps = append(steps, Step{Method: "create_vm", Profile: g.profile, Args: []json.RawMessage{
			raw(fmt.Sprintf("$agent:%d", g.agents)), raw(fmt.Sprintf("$stemcell:%d", sc)),
			orEmpty(g.env.VMCloudProperties), orEmpty(g.env.Networks), raw([]string{}), raw(map[string]any{"bosh": map[string]any{"group": "explore"}})}})
		g.made["vm"]++
	}
	for i, size := range []int{1024, 2048, 1024} {
		locality := json.RawMessage("null")
		if i < 2 {
			locality = raw("$vm:1")
		}
		steps = append(steps, Step{Method: "create_disk", Profile: g.profile, Args: []json.RawMessage{raw(size), orEmpty(g.env.DiskCloudProperties), locality}})
		g.made["disk"]++
	}
	// Then as a Director deploys: two disks on the first VM, metadata on
	// every VM and disk (each its own values), a snapshot of the third
	// disk.
	for _, d := range []string{"$disk:1", "$disk:2"} {
		s := Step{Method: "attach_disk", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1"), raw(d)}}
		steps = append(steps, s)
		g.attached = append(g.attached, s.Args)
	}
	// The disks the VM holds, as the Director's disk checks ask.
	steps = append(steps, Step{Method: "get_disks", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1")}})
	for i := 1; i <= 3; i++ {
		steps = append(steps, Step{Method: "set_vm_metadata", Profile: g.profile, Args: []json.RawMessage{raw(fmt.Sprintf("$vm:%d", i)),
			raw(map[string]string{"director": "cpilab", "deployment": "explore", "name": fmt.Sprintf("job/%d", i), "index": fmt.Sprint(i - 1)})}})
	}
	for i := 1; i <= 3; i++ {
		steps = append(steps, Step{Method: "set_disk_metadata", Profile: g.profile, Args: []json.RawMessage{raw(fmt.Sprintf("$disk:%d", i)),
			raw(map[string]string{"director": "cpilab", "deployment": "explore", "instance_name": fmt.Sprintf("job/%d", i)})}})
	}
	// Snapshots of a detached disk and of an attached one (the
	// Director's take_snapshot of an instance's persistent disk, with the
	// metadata it sends, which no disk carries).
	for _, d := range []string{"$disk:3", "$disk:1"} {
		steps = append(steps, g.snapshot(raw(d)))
	}
	// The paths after a deploy: a restart with the disks attached, a disk
	// detached, grown to a size no multiple of a GiB and attached again,
	// another disk updated in place.
	steps = append(steps,
		Step{Method: "reboot_vm", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1")}},
		Step{Method: "detach_disk", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1"), raw("$disk:2")}},
		Step{Method: "resize_disk", Profile: g.profile, Args: []json.RawMessage{raw("$disk:2"), raw(3000)}},
		Step{Method: "attach_disk", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1"), raw("$disk:2")}},
		Step{Method: "update_disk", Profile: g.profile, Args: []json.RawMessage{raw("$disk:3"), raw(4096), orEmpty(g.env.DiskCloudProperties)}},
		// A snapshot rotation: a newer snapshot of the attached disk,
		// then the older one deleted; and a snapshot's CID asked of
		// has_disk (a CID of another kind).
		g.snapshot(raw("$disk:1")),
		Step{Method: "delete_snapshot", Profile: g.profile, Args: []json.RawMessage{raw("$snapshot:2")}},
		Step{Method: "has_disk", Profile: g.profile, Args: []json.RawMessage{raw("$snapshot:1")}},
		// An orphaned disk deleted, then looked for (the Director's
		// disk scan).
		Step{Method: "create_disk", Profile: g.profile, Args: []json.RawMessage{raw(1024), orEmpty(g.env.DiskCloudProperties), json.RawMessage("null")}},
		Step{Method: "delete_disk", Profile: g.profile, Args: []json.RawMessage{raw("$disk:4")}},
		Step{Method: "has_disk", Profile: g.profile, Args: []json.RawMessage{raw("$disk:4")}},
		// A disk moved to another VM: detached (and the detach retried,
		// the VM still holding its other disk), attached there, the
		// first VM's disks listed (each VM holding one), a stale detach
		// of the previous attachment, then the VM that holds it deleted
		// with the disk on it, as a recreate does, and looked for (the
		// Director's VM scan).
		Step{Method: "detach_disk", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1"), raw("$disk:1")}},
		Step{Method: "detach_disk", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1"), raw("$disk:1")}},
		Step{Method: "attach_disk", Profile: g.profile, Args: []json.RawMessage{raw("$vm:3"), raw("$disk:1")}},
		Step{Method: "get_disks", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1")}},
		Step{Method: "detach_disk", Profile: g.profile, Args: []json.RawMessage{raw("$vm:1"), raw("$disk:1")}},
		Step{Method: "delete_vm", Profile: g.profile, Args: []json.RawMessage{raw("$vm:3")}},
		Step{Method: "has_vm", Profile: g.profile, Args: []json.RawMessage{raw("$vm:3")}},
	)
	g.made["disk"]++
	// At least half the budget: rapid starts from small values, and a
	// lifecycle of two steps after the opening ones walks little.
	n := rapid.IntRange(max(1, maxSteps/2), max(1, maxSteps)).Draw(t, "steps")
	for i := range n {
		label := fmt.Sprintf("step %d", i+1)
		steps = append(steps, g.concurrent(t, g.step(t, label), label))
	}
	return steps
}

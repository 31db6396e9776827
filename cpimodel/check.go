package cpimodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Violation is one thing a call did that no legal outcome allows.
type Violation struct {
	Clause string `json:"clause"`
	Method string `json:"method"`
	// Object names what is wrong ("disk disk-3", "registry vm-2"), Field
	// the field ("attached_to", "metadata.name"), "" for the whole object.
	Object string `json:"object"`
	Field  string `json:"field,omitempty"`
	Did    string `json:"did"`
}

func (v Violation) String() string {
	f := ""
	if v.Field != "" {
		f = " (" + v.Field + ")"
	}
	return fmt.Sprintf("%s: %s: %s%s: %s", v.Clause, v.Method, v.Object, f, v.Did)
}

type checker struct {
	c      Call
	r      Result
	b, a   State
	p      plan
	out    []Violation
	newCID string // the CID the result names, for create_* and update_disk
}

// sees reports whether both views of the cloud show what.
func (k *checker) sees(what string) bool { return k.b.Sees(what) && k.a.Sees(what) }

func (k *checker) add(clause, object, field, format string, args ...any) {
	k.out = append(k.out, Violation{Clause: clause, Method: k.c.Method, Object: object, Field: field, Did: fmt.Sprintf(format, args...)})
}

// Check judges one call: before and after are the whole cloud just before
// and just after it, r its response. It returns the violations (nil when
// the cloud after is a legal next state) and, when the model cannot judge
// the call, why not.
func Check(before State, c Call, r Result, after State) (vs []Violation, notChecked string) {
	p := legal(before, c)
	if !p.Known {
		return nil, p.NotChecked
	}
	k := &checker{c: c, r: r, b: before, a: after, p: p}
	if r.OK() {
		k.success()
	} else {
		k.failure()
	}
	k.frame()
	k.registry()
	return k.out, ""
}

// failure: a failed call creates nothing.
func (k *checker) failure() {
	for _, n := range k.created() {
		k.add(ClauseFailedCall, n, "", "%s failed with %s but created %s (a caller that got an error never learns its CID: it leaks)", k.c.Method, k.r.ErrType, n)
	}
	// Objects it names may be part-way (the caller retries or resolves):
	// no more is asked of them.
	k.p.fp.newStemcells, k.p.fp.newVMs, k.p.fp.newDisks, k.p.fp.newSnapshots = 0, 0, 0, 0
}

// created lists the objects in after that were not in before.
func (k *checker) created() []string {
	var out []string
	for _, c := range newKeys(k.b.Stemcells, k.a.Stemcells) {
		out = append(out, "stemcell "+c)
	}
	for _, c := range newKeys(k.b.VMs, k.a.VMs) {
		out = append(out, "vm "+c)
	}
	for _, c := range newKeys(k.b.Disks, k.a.Disks) {
		out = append(out, "disk "+c)
	}
	for _, c := range newKeys(k.b.Snapshots, k.a.Snapshots) {
		out = append(out, "snapshot "+c)
	}
	return out
}

func newKeys[T any](b, a map[string]T) []string {
	var out []string
	for _, c := range sortedKeys(a) {
		if _, ok := b[c]; !ok {
			out = append(out, c)
		}
	}
	return out
}

// ResultCID reads a CID out of a result: a string, or the first element
// of an array ([vm_cid, networks]); "" for null or "".
func ResultCID(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	var arr []json.RawMessage
	if json.Unmarshal(v, &arr) == nil && len(arr) > 0 && json.Unmarshal(arr[0], &s) == nil {
		return s
	}
	return ""
}

// expectNew checks that a successful create made exactly the object its
// result names, and returns it.
func expectNew[T any](k *checker, kind string, b, a map[string]T) (T, bool) {
	var zero T
	cid := ResultCID(k.r.Value)
	made := newKeys(b, a)
	switch {
	case cid == "":
		return zero, false // the result's shape is the *.create-shape clauses' business
	case !exists(a, cid) && exists(b, cid):
		k.add(ClauseEffect, kind+" "+cid, "", "%s returned %s, which existed before the call and is now gone", k.c.Method, cid)
	case exists(b, cid):
		k.add(ClauseAnswers, kind+" "+cid, "", "%s returned %s, the CID of a %s that existed before the call (made: %v)", k.c.Method, cid, kind, made)
	case !exists(a, cid):
		k.add(ClauseAnswers, kind+" "+cid, "", "%s returned %s, but the cloud has no such %s (made: %v)", k.c.Method, cid, kind, made)
	default:
		return a[cid], true
	}
	return zero, false
}

func (k *checker) success() {
	if !k.p.Succeed {
		switch k.c.Method {
		case "reboot_vm", "set_vm_metadata", "attach_disk", "resize_disk", "update_disk", "snapshot_disk", "set_disk_metadata":
			k.add(ClauseEffect, "call", "", "%s succeeded on an object the cloud does not have (arguments %s)", k.c.Method, args(k.c))
		}
		return
	}
	if e, ok := effects[k.c.Method]; ok {
		e(k)
	}
}

// effects check what a successful call did to the objects it names, by
// method.
var effects = map[string]func(k *checker){
	"create_stemcell":   (*checker).createdStemcell,
	"delete_stemcell":   (*checker).deletedStemcell,
	"create_vm":         (*checker).createdVM,
	"delete_vm":         (*checker).deletedVM,
	"has_vm":            (*checker).answeredHas,
	"has_disk":          (*checker).answeredHas,
	"reboot_vm":         (*checker).rebooted,
	"set_vm_metadata":   (*checker).setVMMetadata,
	"create_disk":       (*checker).createdDisk,
	"delete_disk":       (*checker).deletedDisk,
	"attach_disk":       (*checker).attached,
	"detach_disk":       (*checker).detached,
	"set_disk_metadata": (*checker).setDiskMetadata,
	"get_disks":         (*checker).answeredGetDisks,
	"resize_disk":       (*checker).resized,
	"update_disk":       (*checker).updated,
	"snapshot_disk":     (*checker).snapshotted,
	"delete_snapshot":   (*checker).deletedSnapshot,
}

// createdStemcell: create_stemcell made one stemcell, the one it returned, tagged as asked at api_version 3.
func (k *checker) createdStemcell() {
	if !k.sees(SeenStemcells) {
		return
	}
	c, b, a := k.c, k.b, k.a
	if sc, ok := expectNew(k, "stemcell", b.Stemcells, a.Stemcells); ok {
		k.newCID = sc.CID
		k.p.fp.stemcells[sc.CID] = true
		if c.APIVersion >= 3 {
			var env struct {
				Tags map[string]string `json:"tags"`
			}
			if raw := c.raw(2); raw != nil && json.Unmarshal(raw, &env) == nil {
				if f, did := holdsMeta(sc.Tags, env.Tags); f != "" {
					k.add(ClauseEffect, "stemcell "+sc.CID, "tags."+f, "create_stemcell at api_version %d with tags %v: %s", c.APIVersion, env.Tags, did)
				}
			}
		}
	}
}

// deletedStemcell: the stemcell delete_stemcell named is gone.
func (k *checker) deletedStemcell() {
	if !k.sees(SeenStemcells) {
		return
	}
	c, a := k.c, k.a
	cid, _ := c.str(0)
	if exists(a.Stemcells, cid) {
		k.add(ClauseEffect, "stemcell "+cid, "", "delete_stemcell succeeded and the stemcell is still there")
	}
}

// createdVM: create_vm made one VM, the one it returned, of the agent, stemcell and cloud_properties asked, with no disk, answering the networks asked.
func (k *checker) createdVM() {
	if !k.sees(SeenVMs) {
		return
	}
	c, b, a := k.c, k.b, k.a
	vm, ok := expectNew(k, "vm", b.VMs, a.VMs)
	if !ok {
		return
	}
	k.newCID = vm.CID
	k.p.fp.vms[vm.CID], k.p.fp.registry[vm.CID] = true, true
	agent, _ := c.str(0)
	sc, _ := c.str(1)
	obj := "vm " + vm.CID
	if vm.AgentID != "" && vm.AgentID != agent {
		k.add(ClauseEffect, obj, "agent_id", "create_vm for agent %q made a VM for agent %q", agent, vm.AgentID)
	}
	if vm.Stemcell != "" && vm.Stemcell != sc {
		k.add(ClauseEffect, obj, "stemcell", "create_vm on stemcell %s made a VM of stemcell %s", sc, vm.Stemcell)
	}
	if f := holdsProps(vm.CloudProperties, c.raw(2)); f != "" && vm.CloudProperties != nil {
		k.add(ClauseEffect, obj, "cloud_properties."+f, "create_vm with cloud_properties %s made a VM with %s", excerpt(c.raw(2)), excerpt(vm.CloudProperties))
	}
	if len(vm.Disks) > 0 {
		k.add(ClauseEffect, obj, "disks", "create_vm made a VM with disks attached: %v", sortedKeys(vm.Disks))
	}
	k.networksAgree(vm.CID)
}

// deletedVM: the VM is gone and its disks are kept, detached.
func (k *checker) deletedVM() {
	if !k.sees(SeenVMs) {
		return
	}
	c, a := k.c, k.a
	vm, _ := c.str(0)
	if exists(a.VMs, vm) {
		k.add(ClauseEffect, "vm "+vm, "", "delete_vm succeeded and the VM is still there")
	}
	for d := range k.p.fp.disks {
		if !k.sees(SeenDisks) || !k.sees(SeenAttachments) {
			break
		}
		if !exists(a.Disks, d) {
			k.add(ClauseEffect, "disk "+d, "", "delete_vm of %s deleted its attached disk %s (the Director keeps persistent disks)", vm, d)
		} else if a.Disks[d].AttachedTo != "" {
			k.add(ClauseEffect, "disk "+d, "attached_to", "delete_vm of %s left disk %s attached to %q", vm, d, a.Disks[d].AttachedTo)
		}
		k.sameDisk(d, "attached_to")
	}
}

// answeredHas: has_vm and has_disk answer whether the cloud has the object, before and after the call.
func (k *checker) answeredHas() {
	c, b, a := k.c, k.b, k.a
	if !k.sees(map[string]string{"has_vm": SeenVMs, "has_disk": SeenDisks}[c.Method]) {
		return
	}
	cid, _ := c.str(0)
	has := exists(a.VMs, cid) && exists(b.VMs, cid)
	if c.Method == "has_disk" {
		has = exists(a.Disks, cid) && exists(b.Disks, cid)
	}
	if got := string(k.r.Value); (got == "true" || got == "false") && (got == "true") != has {
		k.add(ClauseAnswers, strings.TrimPrefix(c.Method, "has_")+" "+cid, "", "%s answered %s, but the cloud %s it", c.Method, got, map[bool]string{true: "has", false: "does not have"}[has])
	}
}

// rebooted: reboot_vm kept the VM and everything of it but its boot count and device names.
func (k *checker) rebooted() {
	if !k.sees(SeenVMs) {
		return
	}
	c, b, a := k.c, k.b, k.a
	vm, _ := c.str(0)
	if x, ok := a.VMs[vm]; !ok {
		k.add(ClauseEffect, "vm "+vm, "", "reboot_vm succeeded and the VM is gone")
	} else if y := b.VMs[vm]; x.Boots < y.Boots {
		k.add(ClauseEffect, "vm "+vm, "boots", "the boot count went from %d to %d", y.Boots, x.Boots)
	} else if x.Boots == y.Boots && y.Boots > 0 && k.sees(SeenDetails) {
		// A cloud that counts boots (a count of 0 is one that does not).
		k.add(ClauseEffect, "vm "+vm, "boots", "reboot_vm succeeded and the VM did not boot (boot count still %d)", x.Boots)
	}
	k.sameVM(vm, "boots", "devices")
}

// setVMMetadata: the VM holds every key set_vm_metadata asked, and nothing else of it changed.
func (k *checker) setVMMetadata() {
	if !k.sees(SeenDetails) {
		return
	}
	c, a := k.c, k.a
	vm, _ := c.str(0)
	want, _ := c.meta(1)
	if x, ok := a.VMs[vm]; ok {
		if f, did := holdsMeta(x.Metadata, want); f != "" {
			k.add(ClauseEffect, "vm "+vm, "metadata."+f, "set_vm_metadata %v: %s", want, did)
		}
	}
	k.sameVM(vm, "metadata")
}

// createdDisk: create_disk made one detached disk, the one it returned, of the size and cloud_properties asked.
func (k *checker) createdDisk() {
	if !k.sees(SeenDisks) {
		return
	}
	c, b, a := k.c, k.b, k.a
	d, ok := expectNew(k, "disk", b.Disks, a.Disks)
	if !ok {
		return
	}
	k.newCID = d.CID
	k.p.fp.disks[d.CID] = true
	size, _ := c.num(0)
	k.sizeAsAsked(d, size)
	if f := holdsProps(d.CloudProperties, c.raw(1)); f != "" && k.sees(SeenDetails) {
		k.add(ClauseEffect, "disk "+d.CID, "cloud_properties."+f, "create_disk with cloud_properties %s made a disk with %s", excerpt(c.raw(1)), excerpt(d.CloudProperties))
	}
	if d.AttachedTo != "" {
		k.add(ClauseEffect, "disk "+d.CID, "attached_to", "create_disk made a disk attached to %s", d.AttachedTo)
	}
}

// deletedDisk: the disk delete_disk named is gone.
func (k *checker) deletedDisk() {
	if !k.sees(SeenDisks) {
		return
	}
	c, a := k.c, k.a
	d, _ := c.str(0)
	if exists(a.Disks, d) {
		k.add(ClauseEffect, "disk "+d, "", "delete_disk succeeded and the disk is still there")
	}
}

// attached: the disk is attached to the VM asked, and the VMs' other disks stay.
func (k *checker) attached() {
	if !k.sees(SeenAttachments) {
		return
	}
	c, a := k.c, k.a
	vm, _ := c.str(0)
	d, _ := c.str(1)
	if x, ok := a.Disks[d]; !ok || x.AttachedTo != vm {
		k.add(ClauseEffect, "disk "+d, "attached_to", "attach_disk of %s to %s succeeded, but the disk is attached to %q (exists: %v)", d, vm, x.AttachedTo, ok)
	}
	if x, ok := a.VMs[vm]; ok && !exists(x.Disks, d) {
		k.add(ClauseEffect, "vm "+vm, "disks", "attach_disk of %s to %s succeeded, but the VM's disks are %v", d, vm, sortedKeys(x.Disks))
	}
	k.sameDisk(d, "attached_to")
	for v := range k.p.fp.vms {
		k.sameVM(v, "disks."+d)
	}
}

// detached: the disk is off the VM asked and kept, and a disk on another VM stays there.
func (k *checker) detached() {
	if !k.sees(SeenAttachments) {
		return
	}
	c, b, a := k.c, k.b, k.a
	vm, _ := c.str(0)
	d, _ := c.str(1)
	if x, ok := a.Disks[d]; !ok && exists(b.Disks, d) {
		k.add(ClauseEffect, "disk "+d, "", "detach_disk of %s from %s deleted the disk", d, vm)
	} else if ok && x.AttachedTo == vm {
		k.add(ClauseEffect, "disk "+d, "attached_to", "detach_disk of %s from %s succeeded, but the disk is still attached to it", d, vm)
	}
	if x, ok := a.VMs[vm]; ok && exists(x.Disks, d) {
		k.add(ClauseEffect, "vm "+vm, "disks", "detach_disk of %s succeeded, but the VM still lists it", d)
	}
	if bd := b.Disks[d]; bd.AttachedTo == vm || bd.AttachedTo == "" {
		k.sameDisk(d, "attached_to")
	} else {
		// Detaching a disk from a VM that does not hold it must not
		// detach it from the VM that does.
		k.sameDisk(d)
	}
	k.sameVM(vm, "disks."+d)
}

// setDiskMetadata: the disk holds every key set_disk_metadata asked, and nothing else of it changed.
func (k *checker) setDiskMetadata() {
	if !k.sees(SeenDetails) {
		return
	}
	c, a := k.c, k.a
	d, _ := c.str(0)
	want, _ := c.meta(1)
	if x, ok := a.Disks[d]; ok {
		if f, did := holdsMeta(x.Metadata, want); f != "" {
			k.add(ClauseEffect, "disk "+d, "metadata."+f, "set_disk_metadata %v: %s", want, did)
		}
	}
	k.sameDisk(d, "metadata")
}

// answeredGetDisks: get_disks answers the disks attached to the VM.
func (k *checker) answeredGetDisks() {
	if !k.sees(SeenAttachments) {
		return
	}
	c, b, a := k.c, k.b, k.a
	vm, _ := c.str(0)
	var got []string
	if json.Unmarshal(k.r.Value, &got) != nil || got == nil {
		return // the shape (an array, not null) is disk.get-disks's business
	}
	slices.Sort(got)
	want := attachedTo(a, vm)
	if !slices.Equal(got, want) && slices.Equal(want, attachedTo(b, vm)) {
		k.add(ClauseAnswers, "vm "+vm, "disks", "get_disks answered %v, but the disks attached to the VM are %v", got, want)
	}
}

// resized: the disk resize_disk named has the new size and nothing else of it changed.
func (k *checker) resized() {
	if !k.sees(SeenDisks) {
		return
	}
	c, a := k.c, k.a
	d, _ := c.str(0)
	size, _ := c.num(1)
	if x, ok := a.Disks[d]; ok {
		k.sizeAsAsked(x, size)
	} else {
		k.add(ClauseEffect, "disk "+d, "", "resize_disk succeeded and the disk is gone")
	}
	k.sameDisk(d, "size_mib")
}

// updated: the disk update_disk named (or the new one it returned) has the size and cloud_properties asked.
func (k *checker) updated() {
	if !k.sees(SeenDisks) {
		return
	}
	c, b, a := k.c, k.b, k.a
	old, _ := c.str(0)
	size, _ := c.num(1)
	cid := ResultCID(k.r.Value)
	if cid == "" || cid == old {
		cid = old
		if exists(a.Disks, cid) {
			k.sameDisk(old, "size_mib", "cloud_properties")
		}
	} else {
		k.p.fp.disks[cid] = true
		if exists(b.Disks, cid) {
			k.add(ClauseAnswers, "disk "+cid, "", "update_disk of %s returned %s, a disk that existed before", old, cid)
		}
		if exists(a.Disks, old) {
			k.add(ClauseEffect, "disk "+old, "", "update_disk of %s answered the new disk %s and kept the old one (the caller forgets its CID: it leaks)", old, cid)
		}
	}
	x, ok := a.Disks[cid]
	if !ok {
		k.add(ClauseEffect, "disk "+cid, "", "update_disk of %s succeeded (result %s) and the cloud has no disk %s", old, excerpt(k.r.Value), cid)
		return
	}
	k.newCID = cid
	k.sizeAsAsked(x, size)
	if f := holdsProps(x.CloudProperties, c.raw(2)); f != "" && k.sees(SeenDetails) {
		k.add(ClauseEffect, "disk "+cid, "cloud_properties."+f, "update_disk with cloud_properties %s left the disk with %s", excerpt(c.raw(2)), excerpt(x.CloudProperties))
	}
}

// snapshotted: snapshot_disk made one snapshot, the one it returned, of the disk asked.
func (k *checker) snapshotted() {
	if !k.sees(SeenSnapshots) {
		return
	}
	c, b, a := k.c, k.b, k.a
	sn, ok := expectNew(k, "snapshot", b.Snapshots, a.Snapshots)
	if !ok {
		return
	}
	k.newCID = sn.CID
	k.p.fp.snapshots[sn.CID] = true
	d, _ := c.str(0)
	if sn.Disk != "" && sn.Disk != d {
		k.add(ClauseEffect, "snapshot "+sn.CID, "disk", "snapshot_disk of %s made a snapshot of %s", d, sn.Disk)
	}
}

// deletedSnapshot: the snapshot delete_snapshot named is gone.
func (k *checker) deletedSnapshot() {
	if !k.sees(SeenSnapshots) {
		return
	}
	c, a := k.c, k.a
	sn, _ := c.str(0)
	if exists(a.Snapshots, sn) {
		k.add(ClauseEffect, "snapshot "+sn, "", "delete_snapshot succeeded and the snapshot is still there")
	}
}

// networksAgree: at api_version 2+, the networks create_vm returns keep
// the IPs asked for (a CPI may add members of its own).
func (k *checker) networksAgree(vm string) {
	if k.c.APIVersion < 2 {
		return
	}
	var pair []json.RawMessage
	if json.Unmarshal(k.r.Value, &pair) != nil || len(pair) != 2 {
		return
	}
	type net struct {
		IP string `json:"ip"`
	}
	var asked, got map[string]net
	if json.Unmarshal(k.c.raw(3), &asked) != nil || json.Unmarshal(pair[1], &got) != nil {
		return
	}
	for _, name := range sortedKeys(asked) {
		g, ok := got[name]
		switch {
		case !ok && got != nil:
			k.add(ClauseAnswers, "vm "+vm, "networks."+name, "create_vm was asked for network %q and answered networks without it: %s", name, excerpt(pair[1]))
		case ok && asked[name].IP != "" && g.IP != "" && g.IP != asked[name].IP:
			k.add(ClauseAnswers, "vm "+vm, "networks."+name+".ip", "create_vm was asked for IP %s on network %q and answered %s", asked[name].IP, name, g.IP)
		}
	}
}

// sizeAsAsked: at least the size asked, at most rounded up to whole GiB.
func (k *checker) sizeAsAsked(d Disk, size int) {
	if !k.sees(SeenDetails) {
		return
	}
	if d.SizeMiB < size || d.SizeMiB > (size+1023)/1024*1024 {
		k.add(ClauseEffect, "disk "+d.CID, "size_mib", "%s asked for %d MiB; the disk has %d MiB (allowed: %d to %d)", k.c.Method, size, d.SizeMiB, size, (size+1023)/1024*1024)
	}
}

// sameVM: everything of VM cid but the loose fields is as before (an
// object in the call's footprint, checked here field by field). Loose
// "disks.<cid>" frees that one attachment, "devices" the device names.
func (k *checker) sameVM(cid string, loose ...string) {
	x, okA := k.a.VMs[cid]
	y, okB := k.b.VMs[cid]
	if !okA || !okB {
		return
	}
	if f, did := diffVM(y, x, loose); f != "" {
		k.add(ClauseFrame, "vm "+cid, f, "%s changed it: %s", k.c.Method, did)
	}
}

func (k *checker) sameDisk(cid string, loose ...string) {
	x, okA := k.a.Disks[cid]
	y, okB := k.b.Disks[cid]
	if !okA || !okB {
		return
	}
	if f, did := diffDisk(y, x, loose); f != "" {
		k.add(ClauseFrame, "disk "+cid, f, "%s changed it: %s", k.c.Method, did)
	}
}

// frame: nothing outside the footprint changed.
func (k *checker) frame() {
	fp := k.p.fp
	clause := ClauseFrame
	news := map[string]int{"stemcell": fp.newStemcells, "vm": fp.newVMs, "disk": fp.newDisks, "snapshot": fp.newSnapshots}
	newCID := func(kind, cid string) bool {
		// A success's new object is in the footprint (added by success);
		// otherwise allow up to the count when the result named none.
		if k.r.OK() && k.newCID == "" && news[kind] > 0 {
			news[kind]--
			return true
		}
		return false
	}
	frameMap(k, "stemcell", k.b.Stemcells, k.a.Stemcells, fp.stemcells, newCID, func(x, y Stemcell) (string, string) {
		if !bytes.Equal(x.CloudProperties, y.CloudProperties) {
			return "cloud_properties", fmt.Sprintf("%s → %s", excerpt(x.CloudProperties), excerpt(y.CloudProperties))
		}
		if f, did := diffMeta(x.Tags, y.Tags); f != "" {
			return "tags." + f, did
		}
		return "", ""
	}, clause)
	frameMap(k, "vm", k.b.VMs, k.a.VMs, fp.vms, newCID, func(x, y VM) (string, string) { return diffVM(x, y, nil) }, clause)
	frameMap(k, "disk", k.b.Disks, k.a.Disks, fp.disks, newCID, func(x, y Disk) (string, string) { return diffDisk(x, y, nil) }, clause)
	frameMap(k, "snapshot", k.b.Snapshots, k.a.Snapshots, fp.snapshots, newCID, func(x, y Snapshot) (string, string) {
		if x.Disk != y.Disk {
			return "disk", x.Disk + " → " + y.Disk
		}
		return "", ""
	}, clause)
	if k.b.Registry != nil && k.a.Registry != nil {
		for _, cid := range sortedKeys(union(k.b.Registry, k.a.Registry)) {
			if fp.registry[cid] || (fp.newRegistry && cid == k.newCID) {
				continue
			}
			x, okB := k.b.Registry[cid]
			y, okA := k.a.Registry[cid]
			switch {
			case okB && !okA:
				k.add(ClauseRegistry, "registry "+cid, "", "%s deleted the agent settings of %s, a VM it was not asked about", k.c.Method, cid)
			case !okB && okA:
				k.add(ClauseRegistry, "registry "+cid, "", "%s wrote agent settings for %s, a VM it was not asked about", k.c.Method, cid)
			case !jsonEqual(x.Raw, y.Raw):
				k.add(ClauseRegistry, "registry "+cid, diffJSON(x.Raw, y.Raw), "%s changed the agent settings of %s, a VM it was not asked about", k.c.Method, cid)
			}
		}
	}
}

func frameMap[T any](k *checker, kind string, b, a map[string]T, fp map[string]bool, isNew func(kind, cid string) bool, diff func(x, y T) (string, string), clause string) {
	for _, cid := range sortedKeys(union(b, a)) {
		if fp[cid] {
			continue
		}
		x, okB := b[cid]
		y, okA := a[cid]
		switch {
		case okB && !okA:
			k.add(clause, kind+" "+cid, "", "%s deleted %s %s, which it was not asked to touch", k.c.Method, kind, cid)
		case !okB && okA:
			if !isNew(kind, cid) && k.r.OK() {
				k.add(clause, kind+" "+cid, "", "%s created %s %s, which it was not asked for", k.c.Method, kind, cid)
			}
		default:
			if f, did := diff(x, y); f != "" {
				k.add(clause, kind+" "+cid, f, "%s changed %s %s, which it was not asked to touch: %s", k.c.Method, kind, cid, did)
			}
		}
	}
}

// registry: the settings of the VMs the call touched follow their
// attachments, and go with the VM.
func (k *checker) registry() {
	if k.b.Registry == nil || k.a.Registry == nil || !k.r.OK() {
		return
	}
	regs := maps.Clone(k.p.fp.registry)
	if k.newCID != "" && k.c.Method == "create_vm" {
		regs[k.newCID] = true
	}
	for _, vm := range sortedKeys(regs) {
		s, ok := k.a.Registry[vm]
		if k.c.Method == "delete_vm" {
			if ok && !exists(k.a.VMs, vm) {
				k.add(ClauseRegistry, "registry "+vm, "", "delete_vm of %s left its agent settings in the registry", vm)
			}
			continue
		}
		v, vok := k.a.VMs[vm]
		if !ok || !vok {
			continue
		}
		got, has := s.Persistent()
		if !has {
			continue
		}
		if want := sortedKeys(v.Disks); !slices.Equal(got, want) {
			k.add(ClauseRegistry, "registry "+vm, "disks.persistent", "after %s the registry settings of %s list the persistent disks %v, but the disks attached to it are %v", k.c.Method, vm, got, want)
		}
	}
}

func union[T any](a, b map[string]T) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

func args(c Call) string {
	var parts []string
	for _, a := range c.Args {
		parts = append(parts, excerpt(a))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func excerpt(b []byte) string {
	s := string(b)
	if s == "" {
		return "null"
	}
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

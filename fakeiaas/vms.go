package fakeiaas

// The fake cloud's VMs: create, boot, reboot, delete, metadata.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/cpilab/cpilab/cpiv2"
)

func parseVMProps(raw json.RawMessage) (VMCloudProps, *Error) {
	var p VMCloudProps
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			return p, invalid("VM cloud_properties: %v", err)
		}
	}
	switch p.DevicePrefix {
	case "":
		p.DevicePrefix = "sd"
	case "sd", "xvd", "vd":
	default:
		return p, invalid("VM cloud_properties: device_prefix %q: want sd, xvd or vd", p.DevicePrefix)
	}
	switch p.DiskHint {
	case "":
		p.DiskHint = "path"
	case "path", "string", "id", "volume_id", "lun":
	default:
		return p, invalid("VM cloud_properties: disk_hint %q: want path, string, id, volume_id or lun", p.DiskHint)
	}
	return p, nil
}

// parseVMSize reads the size a VM's cloud_properties ask for (sizes.go).
func parseVMSize(raw json.RawMessage) (VMSize, *Error) {
	var s vmSizing
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &s); err != nil {
			return VMSize{}, invalid("VM cloud_properties: instance_type, cpu, ram and ephemeral_disk.size: %v", err)
		}
	}
	return s.size()
}

func substituteCID(raw json.RawMessage, cid string) (json.RawMessage, *Error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, invalid("user-data is not JSON: %v", err)
	}
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case string:
			if t == VMCIDPlaceholder {
				return cid
			}
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		}
		return x
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return nil, invalid("user-data: %v", err)
	}
	return out, nil
}

// CreateVM creates a VM and its root, then boots it through the hooks
// (unless spec.NoBoot). A boot failure deletes the VM again and returns
// VMCreationFailed (ok_to_retry).
func (c *Cloud) CreateVM(ctx context.Context, spec VMSpec) (VM, error) {
	var out VM
	err := c.mutate(ctx, OpCreateVM, "", func(cl *call, b *batch) *Error {
		if spec.AgentID == "" {
			return invalid("create_vm: agent_id is empty")
		}
		if e := checkCount("create_vm", "VMs", len(c.vms), MaxVMs, "MaxVMs"); e != nil {
			return e
		}
		if e := checkName("create_vm: agent_id", spec.AgentID); e != nil {
			return e
		}
		for _, d := range []struct {
			what string
			raw  json.RawMessage
		}{{"cloud_properties", spec.CloudProperties}, {"networks", spec.Networks}, {"env", spec.Env}, {"user-data", spec.UserData}} {
			if e := checkDoc("create_vm: "+d.what, d.raw); e != nil {
				return e
			}
		}
		if len(spec.DiskLocality) > MaxMetadataEntries {
			return tooLarge("create_vm: %d disk CIDs for locality; the limit is %d", len(spec.DiskLocality), MaxMetadataEntries)
		}
		sc, ok := c.stemcells[spec.StemcellCID.String()]
		if !ok {
			return newErr(CodeNotFound, cpiv2.TypeVMCreationFailed, "create_vm: stemcell %q not found", spec.StemcellCID)
		}
		props, e := parseVMProps(spec.CloudProperties)
		if e != nil {
			return e
		}
		size, e := parseVMSize(spec.CloudProperties)
		if e != nil {
			return e
		}
		cp, e := checkHash("VM cloud_properties", spec.CloudProperties)
		if e != nil {
			return e
		}
		nets, e := checkHash("networks", spec.Networks)
		if e != nil {
			return e
		}
		env, e := checkHash("env", spec.Env)
		if e != nil {
			return e
		}
		cid, e := c.newCIDLocked(kindVM, "vm")
		if e != nil {
			return e
		}
		ud, e := substituteCID(spec.UserData, cid)
		if e != nil {
			return e
		}
		if e := c.claimVMDirLocked(cid); e != nil {
			return e
		}
		if err := c.makeRoot(cid); err != nil {
			_ = c.removeVMDir(cid)
			return internalErr("create_vm", err)
		}
		vm := &VM{
			CID: cpiv2.MustCID[cpiv2.VMKind](cid), AgentID: spec.AgentID, StemcellCID: spec.StemcellCID,
			CloudProperties: cp, Networks: nets, Env: env, DiskLocality: spec.DiskLocality, UserData: ud,
			Props: props, Size: size, StemcellAPIVersion: sc.APIVersion, DeviceResolver: sc.DeviceResolver,
			Created: c.r.Now(), Boots: 1,
		}
		if spec.NoBoot {
			vm.Boots = 0
		}
		c.vms[cid] = vm
		c.devs[cid] = map[string]string{}
		b.create(kindVM, cid, vm)
		cl.h.Target = cid
		cl.h.Detail = "agent_id=" + spec.AgentID
		out = c.viewVMLocked(vm)
		return nil
	})
	if err != nil && !errors.Is(err, ErrResponseLost) {
		return VM{}, err
	}
	if spec.NoBoot {
		if err != nil {
			return VM{}, err
		}
		return out, nil
	}
	if berr := c.boot(out); berr != nil {
		_ = c.deleteVM(ctx, out.CID, "boot failed: "+berr.Error())
		return VM{}, &Error{Code: CodeInternal, CPI: cpiv2.NewError(cpiv2.TypeVMCreationFailed, "create_vm: booting %s: %v", out.CID, berr).Retryable()}
	}
	if err != nil { // applied and booted, but the caller never hears of it
		return VM{}, err
	}
	return out, nil
}

func (c *Cloud) bootInfoLocked(vm *VM) BootInfo {
	bi := BootInfo{
		VMCID: vm.CID.String(), AgentID: vm.AgentID, Root: c.vmRoot(vm.CID.String()),
		StemcellAPIVersion: vm.StemcellAPIVersion, DeviceResolver: vm.DeviceResolver,
		RegistryUser: c.regUser, RegistryPassword: c.regPass,
	}
	if c.baseURL != "" {
		bi.MetadataURL = c.baseURL + "/metadata"
		bi.RegistryURL = c.baseURL + "/registry"
	}
	return bi
}

// BootAll calls the Boot hook for every VM the cloud holds, in CID order:
// the VMs of a cloud reopened from its data dir are running machines, so
// their agents must run too. Call it once the hooks can serve (and, for
// agents that fetch settings over HTTP, after Serve has set the URLs).
func (c *Cloud) BootAll() error {
	if c.hooks == nil {
		return nil
	}
	c.mu.Lock()
	infos := make([]BootInfo, 0, len(c.vms))
	for _, id := range slices.Sorted(maps.Keys(c.vms)) {
		if c.vms[id].Boots == 0 { // created with NoBoot and never booted: it stays down
			continue
		}
		infos = append(infos, c.bootInfoLocked(c.vms[id]))
	}
	c.mu.Unlock()
	var errs []error
	for _, bi := range infos {
		if err := c.hooks.Boot(bi); err != nil {
			errs = append(errs, fmt.Errorf("fakeiaas: booting %s: %w", bi.VMCID, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Cloud) boot(vm VM) error {
	if c.hooks == nil {
		return nil
	}
	c.mu.Lock()
	bi := c.bootInfoLocked(&vm)
	c.mu.Unlock()
	return c.hooks.Boot(bi)
}

func (c *Cloud) halt(cid cpiv2.VMCID) {
	if c.hooks != nil {
		c.hooks.Halt(cid.String())
	}
}

// viewVMLocked returns a copy of vm with Root, Disks and Attachments filled in.
func (c *Cloud) viewVMLocked(vm *VM) VM {
	v := *vm
	v.Metadata = copyMeta(vm.Metadata)
	v.Root = c.vmRoot(vm.CID.String())
	devs := c.devs[vm.CID.String()]
	names := make([]string, 0, len(devs))
	for d := range devs {
		names = append(names, d)
	}
	sort.Slice(names, func(i, j int) bool { return names[i][len(names[i])-1] < names[j][len(names[j])-1] })
	v.Disks = make([]cpiv2.DiskCID, 0, len(names))
	v.Attachments = nil
	for _, d := range names {
		dcid := devs[d]
		v.Disks = append(v.Disks, cpiv2.MustCID[cpiv2.DiskKind](dcid))
		v.Attachments = append(v.Attachments, AttachmentInfo{DiskCID: cpiv2.MustCID[cpiv2.DiskKind](dcid), Device: d, LUN: c.disks[dcid].LUN})
	}
	return v
}

// DeleteVM halts the VM, detaches its disks (they are kept) and removes it
// and its root. A missing VM is VMNotFound.
func (c *Cloud) DeleteVM(ctx context.Context, cid cpiv2.VMCID) error {
	c.mu.Lock()
	_, ok := c.vms[cid.String()]
	c.mu.Unlock()
	if ok {
		c.halt(cid)
	}
	return c.deleteVM(ctx, cid, "")
}

func (c *Cloud) deleteVM(ctx context.Context, cid cpiv2.VMCID, detail string) error {
	return c.mutate(ctx, OpDeleteVM, cid.String(), func(cl *call, b *batch) *Error {
		vm, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		cl.h.Detail = detail
		// Removing the VM's directory removes its device links too; the
		// disks' backing files stay.
		if err := c.removeVMDir(cid.String()); err != nil {
			return internalErr("delete_vm", err)
		}
		var detached []string
		for _, dcid := range c.devs[cid.String()] {
			d := c.disks[dcid]
			d.VMCID, d.Device, d.LUN = cpiv2.VMCID{}, "", 0
			b.put(kindDisk, dcid, d)
			detached = append(detached, dcid)
		}
		sort.Strings(detached)
		if len(detached) > 0 {
			if cl.h.Detail != "" {
				cl.h.Detail += "; "
			}
			cl.h.Detail += fmt.Sprintf("detached %v", detached)
		}
		delete(c.vms, vm.CID.String())
		delete(c.devs, vm.CID.String())
		b.del(kindVM, cid.String())
		return nil
	})
}

// VM returns a VM with its attachments (VMNotFound when absent).
func (c *Cloud) VM(ctx context.Context, cid cpiv2.VMCID) (VM, error) {
	var out VM
	err := c.read(ctx, OpGetVM, cid.String(), false, func(*call) *Error {
		vm, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		out = c.viewVMLocked(vm)
		return nil
	})
	return out, err
}

// VMDisks returns the disks attached to a VM, in device order; never nil.
func (c *Cloud) VMDisks(ctx context.Context, cid cpiv2.VMCID) ([]cpiv2.DiskCID, error) {
	var out []cpiv2.DiskCID
	err := c.read(ctx, OpGetDisks, cid.String(), false, func(*call) *Error {
		vm, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		out = c.viewVMLocked(vm).Disks
		return nil
	})
	return out, err
}

// RebootVM halts and boots a VM through the hooks.
func (c *Cloud) RebootVM(ctx context.Context, cid cpiv2.VMCID) error {
	var vm VM
	err := c.mutate(ctx, OpRebootVM, cid.String(), func(cl *call, b *batch) *Error {
		v, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		v.Boots++
		b.put(kindVM, cid.String(), v)
		vm = *v
		return nil
	})
	if err != nil && !errors.Is(err, ErrResponseLost) {
		return err
	}
	c.halt(cid)
	if berr := c.boot(vm); berr != nil {
		return newErr(CodeInternal, cpiv2.TypeCloudError, "reboot_vm %s: boot: %v", cid, berr)
	}
	return err
}

// SetVMMetadata replaces a VM's metadata.
func (c *Cloud) SetVMMetadata(ctx context.Context, cid cpiv2.VMCID, meta cpiv2.Metadata) error {
	return c.mutate(ctx, OpSetVMMetadata, cid.String(), func(cl *call, b *batch) *Error {
		vm, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		if e := checkMetadata("set_vm_metadata", meta); e != nil {
			return e
		}
		vm.Metadata = copyMeta(meta)
		b.put(kindVM, cid.String(), vm)
		return nil
	})
}

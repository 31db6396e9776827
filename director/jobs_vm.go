package director

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

// lockInstance takes an instance's VM lock and the disk-name locks of the
// dynamic disks attached to it, for the rest of the job (or until the
// returned release is called). It retries until the set of attached disks
// is stable under the locks, so a provide cannot slip a disk in.
func (j *job) lockInstance(instanceID string) (release func(), err error) {
	d := j.d
	for attempt := 0; ; attempt++ {
		attached, err := d.listDynamicDisks(func(dd *DynamicDisk) bool { return dd.InstanceID == instanceID })
		if err != nil {
			return nil, err
		}
		var diskNames []string
		for _, dd := range attached {
			diskNames = append(diskNames, dd.Name)
		}
		names := j.vmLockNames(instanceID)
		if len(names) > 0 { // the window is locked only when the VM lock spans it
			names = append(names, j.diskLockNames(diskNames...)...)
		}
		if len(names) == 0 {
			return func() {}, nil
		}
		var h *heldLocks
		if err := j.step("Locking", "instance "+instanceID, func() error {
			var err error
			h, err = j.acquire(d.cfg.VMLockTimeout, names...)
			return err
		}); err != nil {
			return nil, err
		}
		rel := func() { j.release(h) }
		now, err := d.listDynamicDisks(func(dd *DynamicDisk) bool { return dd.InstanceID == instanceID })
		if err != nil {
			rel()
			return nil, err
		}
		stable := true
		for _, dd := range now {
			if !slices.Contains(diskNames, dd.Name) {
				stable = false
			}
		}
		if stable || j.knobs().NoDiskNameLock {
			return rel, nil
		}
		rel()
		if attempt >= 8 {
			// Never go on with a disk attached that the job has not locked.
			return nil, conflict("instance %q kept gaining dynamic disks while its locks were taken (%d tries)", instanceID, attempt+1)
		}
	}
}

// createVM creates the instance's VM and waits for its agent.
func (j *job) createVM(inst *Instance) error {
	d := j.d
	cc, err := d.cloudConfig()
	if err != nil {
		return err
	}
	var sc Stemcell
	ok, err := j.load(store.Stemcells, inst.Stemcell, &sc)
	if err != nil {
		return err
	}
	if !ok {
		return unprocessable("stemcell %s is not uploaded", inst.Stemcell)
	}
	vt, ok := cc.vmType(inst.VMType)
	if !ok {
		return unprocessable("vm_type %q is not in the cloud config", inst.VMType)
	}
	az, _ := cc.az(inst.AZ)
	nets := cpiv2.Networks{}
	for i, name := range inst.Networks {
		n, _ := cc.network(name)
		net := cpiv2.Network{Type: "dynamic"}
		if len(n.Subnets) > 0 {
			net.DNS = n.Subnets[0].DNS
			net.CloudProperties = cloudProps(n.Subnets[0].CloudProperties)
		}
		if i == 0 {
			net.Default = []string{"dns", "gateway"}
		}
		nets[name] = net
	}
	inst.AgentID = newUUID(d.r)
	rec := *inst
	intent := Intent{Op: IntentCreateVM, InstanceID: inst.ID, AgentID: inst.AgentID, StemcellAPIVersion: sc.APIVersion}
	if err := j.update(func(tx store.Tx) error {
		if err := j.beginIntent(tx, &intent); err != nil {
			return err
		}
		return tx.Put(store.Instances, inst.ID, rec)
	}); err != nil {
		return err
	}
	var res cpiv2.CreateVMResult
	err = j.step("Creating VM", fmt.Sprintf("%s/%s (%d)", inst.Group, inst.ID, inst.Index), func() error {
		var err error
		res, err = d.cfg.CPI.CreateVM(j.cpiCtx(sc.APIVersion), cpiv2.CreateVMArgs{
			AgentID: inst.AgentID, StemcellCID: cpiv2.MustCID[cpiv2.StemcellKind](sc.CID),
			CloudProperties: cloudProps(az.CloudProperties, vt.CloudProperties), Networks: nets,
			Env: cpiv2.MustCloudProps(map[string]any{"bosh": map[string]any{"group": inst.Group}}),
		})
		return err
	})
	if err != nil {
		j.abandonCreateVM(intent, err)
		return fmt.Errorf("create_vm for %s/%s: %w", inst.Group, inst.ID, err)
	}
	vm := VM{CID: res.VMCID.String(), InstanceID: inst.ID, AgentID: inst.AgentID, Deployment: inst.Deployment,
		StemcellAPIVersion: sc.APIVersion}
	inst.VMCID = vm.CID
	rec = *inst
	if err := j.update(func(tx store.Tx) error {
		if err := tx.Put(store.VMs, vm.CID, vm); err != nil {
			return err
		}
		if err := endIntent(tx, intent); err != nil {
			return err
		}
		return tx.Put(store.Instances, inst.ID, rec)
	}); err != nil {
		return err
	}
	return j.step("Waiting for agent", vm.AgentID, func() error {
		if err := d.cfg.Agents.WaitUntilReady(vm.AgentID, d.cfg.AgentTimeout); err != nil {
			return fmt.Errorf("agent %s on new VM %s: %w", vm.AgentID, vm.CID, err)
		}
		return nil
	})
}

// deleteVMOf deletes the instance's VM, detaching its dynamic disks first
// (unless the agent is unresponsive and RecreateUnresponsiveSkipsDetach).
// It returns the names of the disks it detached. The caller holds the
// instance's locks (lockInstance).
func (j *job) deleteVMOf(inst *Instance) ([]string, error) { return j.deleteVMOfKeeping(inst, false) }

// deleteVMOfKeeping is deleteVMOf; keepAttached skips the detach whatever
// the agent answers (upstream's VM delete, Knobs.DeleteVMKeepsDisksAttached).
func (j *job) deleteVMOfKeeping(inst *Instance, keepAttached bool) ([]string, error) {
	d := j.d
	if inst.VMCID == "" {
		return nil, nil
	}
	vm, known, err := d.vm(inst.VMCID)
	if err != nil {
		return nil, err
	}
	if !known {
		vm = VM{CID: inst.VMCID, InstanceID: inst.ID, AgentID: inst.AgentID}
	}
	responsive := true
	_ = j.step("Checking agent", vm.AgentID, func() error {
		if err := d.cfg.Agents.WaitUntilReady(vm.AgentID, d.cfg.AgentPingTimeout); err != nil {
			responsive = false
			j.debugf("agent %s unresponsive: %v", vm.AgentID, err)
		}
		return nil
	})
	attached, err := d.listDynamicDisks(func(dd *DynamicDisk) bool { return dd.VMCID == vm.CID })
	if err != nil {
		return nil, err
	}
	var detached []string
	skip := keepAttached || (!responsive && j.knobs().RecreateUnresponsiveSkipsDetach)
	for i := range attached {
		dd := &attached[i]
		if skip {
			j.debugf("deleting %s with disk %s attached (agent responsive: %v; upstream VM delete)", vm.CID, dd.CID, responsive)
			continue
		}
		if err := j.detach(dd, responsive); err != nil {
			return detached, err
		}
		detached = append(detached, dd.Name)
	}
	if responsive {
		if _, err := d.cfg.Agents.Run(vm.AgentID, agentStop); err != nil && !IsUnknownMessage(err) {
			j.debugf("agent %s stop: %v", vm.AgentID, err)
		}
	}
	intent := Intent{Op: IntentDeleteVM, InstanceID: inst.ID, AgentID: vm.AgentID, VMCID: vm.CID,
		StemcellAPIVersion: vm.StemcellAPIVersion}
	if err := j.update(func(tx store.Tx) error { return j.beginIntent(tx, &intent) }); err != nil {
		return detached, err
	}
	err = j.step("Deleting VM", vm.CID, func() error {
		return j.vmCall(vm.CID, func() error {
			err := d.cfg.CPI.DeleteVM(j.cpiCtx(vm.StemcellAPIVersion), cpiv2.MustCID[cpiv2.VMKind](vm.CID))
			if errors.Is(err, cpiv2.ErrVMNotFound) {
				j.debugf("delete_vm %s: already gone", vm.CID)
				return nil
			}
			return err
		})
	})
	if err != nil {
		_ = j.update(func(tx store.Tx) error { return endIntent(tx, intent) }) // the VM stays recorded
		return detached, fmt.Errorf("delete_vm %s: %w", vm.CID, err)
	}
	inst.VMCID = ""
	rec := *inst
	err = j.update(func(tx store.Tx) error {
		if err := tx.Delete(store.VMs, vm.CID); err != nil {
			return err
		}
		if err := endIntent(tx, intent); err != nil {
			return err
		}
		// As upstream's FK (ON DELETE SET NULL): records still naming
		// the deleted VM lose their attachment.
		for _, dd := range attached {
			if !skip {
				continue
			}
			dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
			if err := tx.Put(store.DynamicDisks, dd.Name, dd); err != nil {
				return err
			}
		}
		return tx.Put(store.Instances, inst.ID, rec)
	})
	return detached, err
}

// recreate deletes and creates the instance's VM under its VM lock, which
// covers the whole window, and re-attaches the detached dynamic disks when
// reattach is set. The caller holds the instance's locks.
func (j *job) recreate(inst *Instance, reattach bool) error {
	detached, err := j.deleteVMOf(inst)
	if err != nil {
		return err
	}
	if err := j.createVM(inst); err != nil {
		return err
	}
	if !reattach {
		return nil
	}
	vm, _, err := j.d.vm(inst.VMCID)
	if err != nil {
		return err
	}
	for _, name := range detached {
		dd, ok, err := j.d.dynamicDisk(name)
		if err != nil {
			return err
		}
		if !ok || dd.Attached() || dd.State != DiskReady {
			j.debugf("not re-attaching %q: it moved or went away", name)
			continue
		}
		if err := j.attach(&dd, *inst, vm); err != nil {
			return err
		}
		if err := j.link(vm, dd); err != nil {
			return err
		}
	}
	return nil
}

// InstanceStateRequest changes an instance's state (PUT
// /deployments/:d/instances/:id). State is "started", "stopped", "restart"
// or "recreate". Hard (with stopped) deletes the VM. ReattachDynamicDisks
// (with recreate) re-attaches the dynamic disks to the new VM.
type InstanceStateRequest struct {
	Deployment           string `json:"deployment"`
	InstanceID           string `json:"instance_id"`
	State                string `json:"state"`
	Hard                 bool   `json:"hard,omitempty"`
	ReattachDynamicDisks bool   `json:"reattach_dynamic_disks,omitempty"`
}

func (j *job) changeInstanceState(req InstanceStateRequest) (any, error) {
	d := j.d
	if err := j.step("Locking", req.Deployment, func() error {
		return j.lock(d.cfg.LockTimeout, deploymentLock(req.Deployment))
	}); err != nil {
		return nil, err
	}
	if _, err := j.lockInstance(req.InstanceID); err != nil {
		return nil, err
	}
	inst, err := d.instance(req.InstanceID)
	if err != nil {
		return nil, err
	}
	agentCall := func(method string) error {
		if inst.VMCID == "" {
			return nil
		}
		_, err := d.cfg.Agents.Run(inst.AgentID, method)
		if IsUnknownMessage(err) {
			j.debugf("agent %s does not know %s: skipped", inst.AgentID, method)
			return nil
		}
		return err
	}
	switch req.State {
	case "stopped":
		if req.Hard {
			if _, err := j.deleteVMOf(&inst); err != nil {
				return nil, err
			}
			inst.State = InstanceDetached
		} else {
			if err := j.step("Stopping", inst.ID, func() error { return agentCall(agentStop) }); err != nil {
				return nil, err
			}
			inst.State = InstanceStopped
		}
	case "started", "restart":
		if req.State == "restart" {
			if err := j.step("Stopping", inst.ID, func() error { return agentCall(agentStop) }); err != nil {
				return nil, err
			}
		}
		if inst.VMCID == "" {
			if err := j.createVM(&inst); err != nil {
				return nil, err
			}
		}
		if err := j.step("Starting", inst.ID, func() error { return agentCall(agentStart) }); err != nil {
			return nil, err
		}
		inst.State = InstanceStarted
	case "recreate":
		if err := j.recreate(&inst, req.ReattachDynamicDisks); err != nil {
			return nil, err
		}
		inst.State = InstanceStarted
	default:
		return nil, badField("state", "must be started, stopped, restart or recreate; got %q", req.State)
	}
	rec := inst
	return map[string]string{"instance_id": inst.ID, "vm_cid": inst.VMCID, "state": string(inst.State)},
		j.update(func(tx store.Tx) error { return tx.Put(store.Instances, inst.ID, rec) })
}

type deleteVMArgs struct {
	VMCID string `json:"vm_cid"`
}

func (j *job) deleteVMJob(req deleteVMArgs) (any, error) {
	d := j.d
	vm, ok, err := d.vm(req.VMCID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("VM %q not found", req.VMCID)
	}
	if _, err := j.lockInstance(vm.InstanceID); err != nil {
		return nil, err
	}
	inst, err := d.instance(vm.InstanceID)
	if err != nil {
		return nil, err
	}
	if inst.VMCID != vm.CID {
		return nil, conflict("VM %s is no longer the VM of instance %s", vm.CID, inst.ID)
	}
	if _, err := j.deleteVMOfKeeping(&inst, j.knobs().DeleteVMKeepsDisksAttached); err != nil {
		return nil, err
	}
	return jobOutput{Message: fmt.Sprintf("vm %s deleted", vm.CID), Result: map[string]string{"vm_cid": vm.CID}}, nil
}

type deploymentArgs struct {
	Deployment string `json:"deployment"`
}

func (j *job) deleteDeployment(req deploymentArgs) (any, error) {
	d := j.d
	if err := j.step("Locking", req.Deployment, func() error {
		return j.lock(d.cfg.LockTimeout, deploymentLock(req.Deployment))
	}); err != nil {
		return nil, err
	}
	insts, err := listAll[Instance](d.st, store.Instances, func(i *Instance) bool { return i.Deployment == req.Deployment })
	if err != nil {
		return nil, err
	}
	for i := range insts {
		inst := &insts[i]
		release, err := j.lockInstance(inst.ID)
		if err != nil {
			return nil, err
		}
		if _, err := j.deleteVMOfKeeping(inst, j.knobs().DeleteVMKeepsDisksAttached); err != nil {
			release()
			return nil, err
		}
		err = j.update(func(tx store.Tx) error { return tx.Delete(store.Instances, inst.ID) })
		release()
		if err != nil {
			return nil, err
		}
	}
	disks, err := d.listDynamicDisks(func(dd *DynamicDisk) bool { return dd.Deployment == req.Deployment })
	if err != nil {
		return nil, err
	}
	for _, dd := range disks {
		locked, ok, err := j.lockDisk(dd.Name, true)
		if err != nil {
			return nil, err
		}
		if ok {
			if err := j.deleteDiskLocked(&locked); err != nil {
				return nil, err
			}
		}
		j.releaseAllBut(deploymentLock(req.Deployment))
	}
	return map[string]string{"deployment": req.Deployment},
		j.update(func(tx store.Tx) error { return tx.Delete(store.Deployments, req.Deployment) })
}

// releaseAllBut releases every held lock set that does not hold keep.
func (j *job) releaseAllBut(keep string) {
	var kept []*heldLocks
	for _, h := range j.held {
		if slices.Contains(h.names, keep) {
			kept = append(kept, h)
		} else {
			h.release()
		}
	}
	j.held = kept
}

package director

import (
	"encoding/json"
	"fmt"

	"github.com/cpilab/cpilab/director/store"
)

// The operations below validate a request, queue its task and return the
// task ID; the HTTP API and the simulator call them alike. A refused request
// returns an *Error (400 naming the field, 404, 422).

func validateDiskName(field, name string) error {
	if err := validName(name); err != nil {
		return badField(field, "%v", err)
	}
	return nil
}

func (d *Director) checkInstance(id string) (Instance, error) {
	if id == "" {
		return Instance{}, badField("instance_id", "is required")
	}
	if err := checkID("instance_id", id); err != nil {
		return Instance{}, err
	}
	return d.instance(id)
}

func (d *Director) checkPool(pool string) error {
	if pool == "" {
		return badField("disk_pool_name", "is required")
	}
	if err := checkID("disk_pool_name", pool); err != nil {
		return err
	}
	cc, err := d.cloudConfig()
	if err != nil {
		return err
	}
	if _, ok := cc.diskType(pool); !ok {
		return unprocessable("disk pool %q is not a disk_type of the cloud config", pool)
	}
	return nil
}

func checkMetadata(m map[string]string) error { return checkMetadataLimits(m) }

// Provide queues POST /dynamic_disks/provide.
func (d *Director) Provide(user string, req ProvideRequest) (int64, error) {
	if err := validateDiskName("disk_name", req.DiskName); err != nil {
		return 0, err
	}
	if err := checkDiskSize("disk_size", req.DiskSize); err != nil {
		return 0, err
	}
	if err := checkMetadata(req.Metadata); err != nil {
		return 0, err
	}
	if err := d.checkPool(req.DiskPoolName); err != nil {
		return 0, err
	}
	inst, err := d.checkInstance(req.InstanceID)
	if err != nil {
		return 0, err
	}
	return d.enqueue(user, jobProvide, inst.Deployment, fmt.Sprintf("provide dynamic disk %s to %s", req.DiskName, req.InstanceID), req)
}

// CreateDynamicDisk queues POST /dynamic_disks.
func (d *Director) CreateDynamicDisk(user string, req CreateDiskRequest) (int64, error) {
	if err := validateDiskName("disk_name", req.DiskName); err != nil {
		return 0, err
	}
	if err := checkDiskSize("disk_size", req.DiskSize); err != nil {
		return 0, err
	}
	if err := checkMetadata(req.Metadata); err != nil {
		return 0, err
	}
	if err := d.checkPool(req.DiskPoolName); err != nil {
		return 0, err
	}
	switch {
	case req.InstanceID != "":
		inst, err := d.checkInstance(req.InstanceID)
		if err != nil {
			return 0, err
		}
		req.Deployment = inst.Deployment
	case req.Deployment != "":
		if err := checkID("deployment_name", req.Deployment); err != nil {
			return 0, err
		}
		var dep Deployment
		var ok bool
		if err := d.st.View(func(tx store.Tx) error {
			var err error
			ok, err = tx.Get(store.Deployments, req.Deployment, &dep)
			return err
		}); err != nil {
			return 0, err
		}
		if !ok {
			return 0, notFound("deployment %q not found", req.Deployment)
		}
	default:
		return 0, badField("instance_id", "instance_id or deployment_name is required")
	}
	return d.enqueue(user, jobCreate, req.Deployment, "create dynamic disk "+req.DiskName, req)
}

// AttachDynamicDisk queues POST /dynamic_disks/:disk_name/attach.
func (d *Director) AttachDynamicDisk(user string, req AttachRequest) (int64, error) {
	if err := validateDiskName("disk_name", req.DiskName); err != nil {
		return 0, err
	}
	inst, err := d.checkInstance(req.InstanceID)
	if err != nil {
		return 0, err
	}
	return d.enqueue(user, jobAttach, inst.Deployment, fmt.Sprintf("attach dynamic disk %s to %s", req.DiskName, req.InstanceID), req)
}

// DetachDynamicDisk queues POST /dynamic_disks/:disk_name/detach. An unknown
// name queues a task that fails (CONTRACTS §6: "unknown name → fail").
func (d *Director) DetachDynamicDisk(user, name string) (int64, error) {
	if err := validateDiskName("disk_name", name); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobDetach, "", "detach dynamic disk "+name, diskNameArgs{DiskName: name})
}

// DeleteDynamicDisk queues DELETE /dynamic_disks/:disk_name.
func (d *Director) DeleteDynamicDisk(user, name string) (int64, error) {
	if err := validateDiskName("disk_name", name); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobDelete, "", "delete dynamic disk "+name, diskNameArgs{DiskName: name})
}

// DynamicDisks lists the dynamic disks, by name.
func (d *Director) DynamicDisks() ([]DynamicDisk, error) { return d.listDynamicDisks(nil) }

// DynamicDisk returns one dynamic disk, or a 404 error.
func (d *Director) DynamicDisk(name string) (DynamicDisk, error) {
	dd, ok, err := d.dynamicDisk(name)
	if err == nil && !ok {
		err = notFound("dynamic disk %q not found", name)
	}
	return dd, err
}

// UploadStemcell queues a stemcell upload: mf is stemcell.MF, imagePath the
// image the CPI's create_stemcell reads.
func (d *Director) UploadStemcell(user string, mf []byte, imagePath string) (int64, error) {
	if err := checkStemcellManifestLimits(mf); err != nil {
		return 0, err
	}
	m, err := ParseStemcellManifest(mf)
	if err != nil {
		return 0, err
	}
	if imagePath == "" {
		return 0, badField("image_path", "is required")
	}
	if err := checkPath("image_path", imagePath); err != nil {
		return 0, err
	}
	if err := checkID("stemcell.MF name", m.Name); err != nil {
		return 0, err
	}
	if err := checkID("stemcell.MF version", m.Version); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobUploadStemcell, "", fmt.Sprintf("upload stemcell %s/%s", m.Name, m.Version),
		stemcellArgs{Manifest: *m, ImagePath: imagePath})
}

// Stemcells lists uploaded stemcells.
func (d *Director) Stemcells() ([]Stemcell, error) {
	return listAll[Stemcell](d.st, store.Stemcells, nil)
}

// UpdateCloudConfig queues replacing the cloud config with text (YAML).
func (d *Director) UpdateCloudConfig(user string, text []byte) (int64, error) {
	if err := checkCloudConfigLimits(text, nil); err != nil {
		return 0, err
	}
	cc, err := ParseCloudConfig(text)
	if err != nil {
		return 0, err
	}
	if err := checkCloudConfigLimits(text, cc); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobUpdateCloudConfig, "", "update cloud config", cloudConfigArgs{YAML: string(text)})
}

// CloudConfig returns the current cloud config.
func (d *Director) CloudConfig() (*CloudConfig, error) { return d.cloudConfig() }

// Deploy queues deploying a manifest (YAML).
func (d *Director) Deploy(user string, manifest []byte) (int64, error) {
	if err := checkManifestLimits(manifest, nil); err != nil {
		return 0, err
	}
	cc, err := d.cloudConfig()
	if err != nil {
		return 0, err
	}
	m, err := ParseManifest(manifest, cc)
	if err != nil {
		return 0, err
	}
	if err := checkManifestLimits(manifest, m); err != nil {
		return 0, err
	}
	for _, ms := range m.Stemcells {
		if _, err := d.resolveStemcell(ms); err != nil {
			return 0, err
		}
	}
	return d.enqueue(user, jobDeploy, m.Name, "create deployment "+m.Name, deployArgs{Manifest: string(manifest)})
}

// Deployments lists deployments.
func (d *Director) Deployments() ([]Deployment, error) {
	return listAll[Deployment](d.st, store.Deployments, nil)
}

// Instances lists a deployment's instances ("" : every deployment's),
// returning a 404 error for an unknown deployment.
func (d *Director) Instances(deployment string) ([]Instance, error) {
	if deployment != "" {
		if err := d.checkDeployment(deployment); err != nil {
			return nil, err
		}
	}
	return listAll[Instance](d.st, store.Instances, func(i *Instance) bool {
		return deployment == "" || i.Deployment == deployment
	})
}

func (d *Director) checkDeployment(name string) error {
	var ok bool
	err := d.st.View(func(tx store.Tx) error {
		var err error
		ok, err = tx.Get(store.Deployments, name, &json.RawMessage{})
		return err
	})
	if err == nil && !ok {
		err = notFound("deployment %q not found", name)
	}
	return err
}

// VMs lists the director's VMs.
func (d *Director) VMs() ([]VM, error) { return listAll[VM](d.st, store.VMs, nil) }

// ChangeInstanceState queues a state change of one instance.
func (d *Director) ChangeInstanceState(user string, req InstanceStateRequest) (int64, error) {
	switch req.State {
	case "started", "stopped", "restart", "recreate":
	default:
		return 0, badField("state", "must be started, stopped, restart or recreate; got %q", req.State)
	}
	inst, err := d.checkInstance(req.InstanceID)
	if err != nil {
		return 0, err
	}
	if req.Deployment != "" && req.Deployment != inst.Deployment {
		return 0, notFound("instance %q is not in deployment %q", req.InstanceID, req.Deployment)
	}
	req.Deployment = inst.Deployment
	return d.enqueue(user, jobInstanceState, inst.Deployment, fmt.Sprintf("%s instance %s/%s", req.State, inst.Group, inst.ID), req)
}

// DeleteVM queues DELETE /vms/:cid.
func (d *Director) DeleteVM(user, cid string) (int64, error) {
	if err := checkID("vm_cid", cid); err != nil {
		return 0, err
	}
	vm, ok, err := d.vm(cid)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, notFound("VM %q not found", cid)
	}
	return d.enqueue(user, jobDeleteVM, vm.Deployment, "delete vm "+cid, deleteVMArgs{VMCID: cid})
}

// DeleteDeployment queues DELETE /deployments/:name.
func (d *Director) DeleteDeployment(user, name string) (int64, error) {
	if err := d.checkDeployment(name); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobDeleteDeployment, name, "delete deployment "+name, deploymentArgs{Deployment: name})
}

// OrphanedDisks lists the orphaned disks.
func (d *Director) OrphanedDisks() ([]OrphanedDisk, error) {
	return listAll[OrphanedDisk](d.st, store.OrphanedDisks, nil)
}

// DeleteOrphanedDisks queues deleting the named orphaned disks (none named:
// all of them).
func (d *Director) DeleteOrphanedDisks(user string, cids []string) (int64, error) {
	if len(cids) > MaxOrphanCIDs {
		return 0, tooBig("disk_cids", len(cids), MaxOrphanCIDs, "CIDs")
	}
	for _, c := range cids {
		if err := checkID("disk_cid", c); err != nil {
			return 0, err
		}
	}
	return d.enqueue(user, jobDeleteOrphans, "", "delete orphaned disks", orphanArgs{CIDs: cids})
}

// Locks lists the locks held now, as mirrored in the store.
func (d *Director) Locks() ([]LockRecord, error) { return listAll[LockRecord](d.st, store.Locks, nil) }

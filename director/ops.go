package director

import (
	"encoding/json"
	"fmt"

	"github.com/cpilab/cpilab/director/store"
)

// The operations below validate a request, queue its task and return the
// task ID; the HTTP API and the simulator call them alike. A refused request
// returns an *Error (400 naming the field, 404, 422).

// checkDiskName checks a disk name: upstream takes any non-empty string;
// the reference director also refuses names a path segment cannot carry
// (see ValidDiskName), unless Knobs.AnyDiskName.
func (d *Director) checkDiskName(name string) error {
	if name == "" {
		return validation(CodeValidationViolatedMin, "disk_name", "'disk_name' length (0) should be greater than 1")
	}
	if d.cfg.Knobs.AnyDiskName {
		return nil
	}
	if err := validName(name); err != nil {
		return validation(CodeValidationInvalid, "disk_name", "'disk_name' %v", err)
	}
	return nil
}

// required checks that string properties are set (the HTTP API has already
// checked them; the simulator calls the operations directly).
func required(props ...[2]string) error {
	for _, p := range props {
		if p[1] == "" {
			return validation(CodeValidationMissing, p[0], "Required property '%s' was not specified", p[0])
		}
	}
	return nil
}

func checkSize(size int) error {
	if size < 1 {
		return validation(CodeValidationViolatedMin, "disk_size", "'disk_size' value (%d) should be greater than 1", size)
	}
	return checkDiskSize("disk_size", size)
}

// checkIDs bounds the IDs and names of a request (limits.go).
func checkIDs(props ...[2]string) error {
	for _, p := range props {
		if err := checkID(p[0], p[1]); err != nil {
			return err
		}
	}
	return nil
}

// deploymentOf is the deployment of an instance for the task's record; ""
// when the instance is unknown (the task will say so).
func (d *Director) deploymentOf(instanceID string) string {
	if in, err := d.instance(instanceID); err == nil {
		return in.Deployment
	}
	return ""
}

// Provide queues POST /dynamic_disks/provide. Only the request itself is
// checked here (400); a missing instance, VM or disk pool fails the task,
// as upstream.
func (d *Director) Provide(user string, req ProvideRequest) (int64, error) {
	if err := required([2]string{"instance_id", req.InstanceID}, [2]string{"disk_pool_name", req.DiskPoolName}); err != nil {
		return 0, err
	}
	if err := d.checkDiskName(req.DiskName); err != nil {
		return 0, err
	}
	if err := checkSize(req.DiskSize); err != nil {
		return 0, err
	}
	if err := checkIDs([2]string{"instance_id", req.InstanceID}, [2]string{"disk_pool_name", req.DiskPoolName}); err != nil {
		return 0, err
	}
	if err := checkMetadataLimits(req.Metadata); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobProvide, d.diskTaskDeployment(d.deploymentOf(req.InstanceID)), "provide dynamic disk", req)
}

// CreateDynamicDisk queues POST /dynamic_disks. A missing deployment, AZ
// VM or disk pool, or an existing name, fails the task, as upstream.
func (d *Director) CreateDynamicDisk(user string, req CreateDiskRequest) (int64, error) {
	if req.InstanceID == "" {
		if err := required([2]string{"deployment_name", req.Deployment}, [2]string{"az", req.AZ}); err != nil {
			return 0, err
		}
	}
	if err := d.checkDiskName(req.DiskName); err != nil {
		return 0, err
	}
	if err := required([2]string{"disk_pool_name", req.DiskPoolName}); err != nil {
		return 0, err
	}
	if err := checkSize(req.DiskSize); err != nil {
		return 0, err
	}
	if err := checkIDs([2]string{"instance_id", req.InstanceID}, [2]string{"disk_pool_name", req.DiskPoolName},
		[2]string{"deployment_name", req.Deployment}, [2]string{"az", req.AZ}); err != nil {
		return 0, err
	}
	if err := checkMetadataLimits(req.Metadata); err != nil {
		return 0, err
	}
	dep := req.Deployment
	if dep == "" {
		dep = d.deploymentOf(req.InstanceID)
	}
	return d.enqueue(user, jobCreate, d.diskTaskDeployment(dep), "create dynamic disk", req)
}

// AttachDynamicDisk queues POST /dynamic_disks/:disk_name/attach.
func (d *Director) AttachDynamicDisk(user string, req AttachRequest) (int64, error) {
	if err := d.checkDiskName(req.DiskName); err != nil {
		return 0, err
	}
	if err := required([2]string{"instance_id", req.InstanceID}); err != nil {
		return 0, err
	}
	if err := checkIDs([2]string{"instance_id", req.InstanceID}); err != nil {
		return 0, err
	}
	if err := checkMetadataLimits(req.Metadata); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobAttach, d.diskTaskDeployment(d.deploymentOf(req.InstanceID)), "attach dynamic disk", req)
}

// diskTaskDeployment is the deployment a provide, create or attach task is
// recorded with: dep, or none under DiskTasksWithoutDeployment.
func (d *Director) diskTaskDeployment(dep string) string {
	if d.cfg.Knobs.DiskTasksWithoutDeployment {
		return ""
	}
	return dep
}

// DetachDynamicDisk queues POST /dynamic_disks/:disk_name/detach. An unknown
// name queues a task that fails, as upstream.
func (d *Director) DetachDynamicDisk(user, name string) (int64, error) {
	if err := d.checkDiskName(name); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobDetach, "", "detach dynamic disk", diskNameArgs{DiskName: name})
}

// DeleteDynamicDisk queues DELETE /dynamic_disks/:disk_name.
func (d *Director) DeleteDynamicDisk(user, name string) (int64, error) {
	if err := d.checkDiskName(name); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobDelete, "", "delete dynamic disk", diskNameArgs{DiskName: name})
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
	if req.InstanceID == "" {
		return 0, badField("instance_id", "is required")
	}
	inst, err := d.instance(req.InstanceID)
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

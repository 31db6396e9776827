package upstreamfixture

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
)

// The jobs, step for step as jobs/dynamic_disks/*.rb at upstream @96f9135.
// They run one at a time on the fixture's worker; each holds s.mu only
// around its reads and writes of the model, as the Ruby jobs hold no lock
// but the VM lock around single CPI calls.

// call records a CPI or agent call.
func (s *Server) call(method string, args ...any) {
	s.mu.Lock()
	s.calls = append(s.calls, Call{Method: method, Args: args})
	s.mu.Unlock()
}

func (s *Server) instance(id string) (Instance, bool) {
	for _, in := range s.insts {
		if in.ID == id {
			return in, true
		}
	}
	return Instance{}, false
}

func (s *Server) diskCloudProperties(pool string) (map[string]any, error) {
	cp, ok := s.cfg.DiskPools[pool]
	if !ok {
		return nil, fmt.Errorf("Could not find disk pool by name `%s`", pool)
	}
	return maps.Clone(cp), nil
}

func (s *Server) lookup(name string) *disk {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disks[name]
}

func (s *Server) createDisk(size int, props map[string]any, vm string) string {
	s.call("create_disk", size, props, vm)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return fmt.Sprintf("disk-%04d", s.seq)
}

// setMetadata is the jobs' `!@metadata.nil? && disk_model.metadata !=
// @metadata` (a disk without metadata reads as {}) and
// MetadataUpdater#update_dynamic_disk_metadata.
func (s *Server) setMetadata(d *disk, meta map[string]any) {
	if meta == nil || len(meta) == 0 && len(d.metadata) == 0 || reflect.DeepEqual(d.metadata, meta) {
		return
	}
	tags := maps.Clone(meta)
	tags["director"] = s.cfg.Name
	tags["deployment"] = d.deployment
	s.call("set_disk_metadata", d.cid, tags)
	s.mu.Lock()
	d.metadata = meta
	s.mu.Unlock()
}

func result(cid string) string {
	b, _ := json.Marshal(map[string]string{"disk_cid": cid})
	return string(b) + "\n"
}

func (s *Server) provideJob(instanceID, name, pool string, size int, meta map[string]any) (string, string, error) {
	inst, ok := s.instance(instanceID)
	if !ok {
		return "", "", fmt.Errorf("instance `%s` not found", instanceID)
	}
	props, err := s.diskCloudProperties(pool)
	if err != nil {
		return "", "", err
	}
	d := s.lookup(name)
	if d == nil {
		props["name"] = name
		cid := s.createDisk(size, props, inst.VMCID)
		s.mu.Lock()
		d = &disk{name: name, cid: cid, deployment: s.cfg.Deployment, size: size, pool: pool}
		s.disks[name] = d
		s.mu.Unlock()
	}
	if d.vm == "" {
		s.call("attach_disk", inst.VMCID, d.cid)
		s.mu.Lock()
		d.vm, d.az, d.hint = inst.VMCID, inst.AZ, "/dev/sdc"
		s.mu.Unlock()
	} else if d.vm != inst.VMCID {
		return "", "", fmt.Errorf("disk is attached to a different vm `%s`", d.vm)
	}
	s.setMetadata(d, meta)
	if d.hint != "" {
		s.call("agent.add_dynamic_disk", inst.AgentID, d.cid, d.hint)
	}
	return fmt.Sprintf("attached disk `%s` to `%s` in deployment `%s`", name, inst.VMCID, s.cfg.Deployment), result(d.cid), nil
}

func (s *Server) createJob(deployment, az, name, pool string, size int, meta map[string]any) (string, string, error) {
	if s.lookup(name) != nil {
		return "", "", fmt.Errorf("disk `%s` already exists", name)
	}
	if deployment != s.cfg.Deployment {
		return "", "", fmt.Errorf("deployment `%s` not found", deployment)
	}
	var vm string
	for _, in := range s.insts {
		if in.AZ == az && vm == "" {
			vm = in.VMCID
		}
	}
	if vm == "" {
		return "", "", fmt.Errorf("no active VM found in deployment `%s` in AZ `%s`", deployment, az)
	}
	props, err := s.diskCloudProperties(pool)
	if err != nil {
		return "", "", err
	}
	props["name"] = name
	cid := s.createDisk(size, props, vm)
	s.mu.Lock()
	d := &disk{name: name, cid: cid, deployment: deployment, size: size, pool: pool, az: az}
	s.disks[name] = d
	s.mu.Unlock()
	s.setMetadata(d, meta)
	return fmt.Sprintf("created disk `%s` in deployment `%s` in AZ `%s`", name, deployment, az), result(cid), nil
}

func (s *Server) attachJob(name, instanceID string, meta map[string]any) (string, string, error) {
	d := s.lookup(name)
	if d == nil {
		return "", "", fmt.Errorf("disk `%s` not found", name)
	}
	inst, ok := s.instance(instanceID)
	if !ok {
		return "", "", fmt.Errorf("instance `%s` not found", instanceID)
	}
	same := false
	if d.vm != "" {
		if d.vm != inst.VMCID {
			return "", "", fmt.Errorf("disk `%s` is already attached to a different vm `%s`", name, d.vm)
		}
		same = true
	}
	if d.az != "" && inst.AZ != "" && d.az != inst.AZ {
		return "", "", fmt.Errorf("disk `%s` is in AZ `%s` but instance `%s` is in AZ `%s`", name, d.az, instanceID, inst.AZ)
	}
	if d.deployment != "" && d.deployment != s.cfg.Deployment {
		return "", "", fmt.Errorf("disk `%s` belongs to deployment `%s` and cannot be attached to deployment `%s`", name, d.deployment, s.cfg.Deployment)
	}
	if !same {
		s.call("attach_disk", inst.VMCID, d.cid)
		s.mu.Lock()
		d.vm, d.az, d.hint = inst.VMCID, inst.AZ, "/dev/sdc"
		s.mu.Unlock()
	}
	s.setMetadata(d, meta)
	s.call("agent.add_dynamic_disk", inst.AgentID, d.cid, d.hint)
	return fmt.Sprintf("attached disk `%s` to vm `%s` in deployment `%s`", name, inst.VMCID, s.cfg.Deployment), "", nil
}

func (s *Server) detachJob(name string) (string, string, error) {
	d := s.lookup(name)
	if d == nil {
		return "", "", fmt.Errorf("disk `%s` can not be found in the database", name)
	}
	if d.vm == "" {
		return fmt.Sprintf("disk `%s` was already detached", d.cid), "", nil
	}
	vm := d.vm
	for _, in := range s.insts {
		if in.VMCID == vm {
			s.call("agent.remove_dynamic_disk", in.AgentID, d.cid)
		}
	}
	s.call("detach_disk", vm, d.cid)
	s.mu.Lock()
	d.vm, d.hint = "", ""
	s.mu.Unlock()
	return fmt.Sprintf("detached disk `%s` from vm `%s`", d.cid, vm), "", nil
}

func (s *Server) deleteJob(name string) (string, string, error) {
	d := s.lookup(name)
	if d == nil {
		return fmt.Sprintf("disk with name `%s` was already deleted", name), "", nil
	}
	s.call("has_disk", d.cid)
	s.call("delete_disk", d.cid) // the fixture's IaaS always has it
	s.mu.Lock()
	delete(s.disks, name)
	s.mu.Unlock()
	return fmt.Sprintf("deleted disk `%s`", d.cid), "", nil
}

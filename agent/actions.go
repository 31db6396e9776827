package agent

import (
	"encoding/json"
	"fmt"
)

// action is one agent method. Long-running (async) actions answer with a
// task and are polled with get_task.
type action struct {
	async bool
	run   func(args []json.RawMessage) (any, error)
}

// Method names this agent answers (upstream concrete_factory.go, plus the
// cpilab extension dynamic_disk_usage).
const (
	MethodPing                 = "ping"
	MethodGetState             = "get_state"
	MethodGetTask              = "get_task"
	MethodAddPersistentDisk    = "add_persistent_disk"
	MethodRemovePersistentDisk = "remove_persistent_disk"
	MethodMountDisk            = "mount_disk"
	MethodUnmountDisk          = "unmount_disk"
	MethodListDisk             = "list_disk"
	MethodAddDynamicDisk       = "add_dynamic_disk"
	MethodRemoveDynamicDisk    = "remove_dynamic_disk"
	MethodDynamicDiskUsage     = "dynamic_disk_usage"
)

func (a *Agent) actionTable() map[string]action {
	t := map[string]action{
		MethodPing:                 {run: func([]json.RawMessage) (any, error) { return "pong", nil }},
		MethodGetState:             {run: a.getState},
		MethodGetTask:              {run: a.getTask},
		MethodAddPersistentDisk:    {async: true, run: a.addPersistentDisk},
		MethodRemovePersistentDisk: {async: true, run: a.removePersistentDisk},
		MethodMountDisk:            {async: true, run: a.mountDisk},
		MethodUnmountDisk:          {async: true, run: a.unmountDisk},
		MethodListDisk:             {async: true, run: a.listDisk},
		MethodAddDynamicDisk:       {async: true, run: a.addDynamicDisk},
		MethodRemoveDynamicDisk:    {run: a.removeDynamicDisk},
		MethodDynamicDiskUsage:     {run: a.dynamicDiskUsageAction},
	}
	if a.cfg.Mode == ModeOld {
		delete(t, MethodAddDynamicDisk)
		delete(t, MethodRemoveDynamicDisk)
		delete(t, MethodDynamicDiskUsage)
	}
	return t
}

// State is get_state's answer (the part of upstream's that cpilab uses).
type State struct {
	// AgentID is the agent's ID.
	AgentID string `json:"agent_id"`
	// VM names the VM ({"name": vm_cid}).
	VM VMSettings `json:"vm"`
	// JobState is always "running": the fake VM runs no jobs.
	JobState string `json:"job_state"`
	// BoshProtocol is the protocol version, "3".
	BoshProtocol string `json:"bosh_protocol"`
	// Processes is always empty.
	Processes []string `json:"processes"`
}

func (a *Agent) getState([]json.RawMessage) (any, error) {
	vm := a.Settings().VM
	if vm.Name == "" {
		vm.Name = a.cfg.VMCID
	}
	return State{AgentID: a.agentID, VM: vm, JobState: "running", BoshProtocol: "3", Processes: []string{}}, nil
}

// stringArg decodes argument i of method as a string.
func stringArg(method string, args []json.RawMessage, i int, name string) (string, error) {
	if len(args) <= i {
		return "", fmt.Errorf("Extracting method arguments from payload: Not enough arguments, expected %d, got %d (%s of %s missing)", i+1, len(args), name, method)
	}
	var s string
	if err := json.Unmarshal(args[i], &s); err != nil {
		return "", fmt.Errorf("Extracting method arguments from payload: argument %d (%s) of %s must be a string", i+1, name, method)
	}
	return s, nil
}

// diskArgs decodes (disk_cid, hint) and turns them into checked settings
// (only decoded under Knobs.LaxNames).
func (a *Agent) diskArgs(method string, args []json.RawMessage) (DiskSettings, error) {
	cid, err := stringArg(method, args, 0, "disk_cid")
	if err != nil {
		return DiskSettings{}, err
	}
	if len(args) < 2 {
		return DiskSettings{}, fmt.Errorf("Extracting method arguments from payload: Not enough arguments, expected 2, got %d (the hint of %s missing)", len(args), method)
	}
	decode := DecodeDiskSettings
	if a.cfg.Knobs.LaxNames {
		decode = decodeDiskSettingsLax
	}
	ds, err := decode(cid, args[1])
	if err != nil {
		return DiskSettings{}, err
	}
	return ds, nil
}

// cidArg decodes a disk CID argument and checks it is a safe name (only
// that it is not empty under Knobs.LaxNames).
func (a *Agent) cidArg(method string, args []json.RawMessage) (string, error) {
	cid, err := stringArg(method, args, 0, "disk_cid")
	if err != nil {
		return "", err
	}
	check := CheckName
	if a.cfg.Knobs.LaxNames {
		check = checkLaxName
	}
	if err := check("disk CID", cid); err != nil {
		return "", err
	}
	return cid, nil
}

// Package agent is cpilab's reference BOSH agent for fake VMs. It works on a
// VM root directory laid out as docs/seams.md says (dev/, sys/, var/vcap/…)
// and never reads or writes outside it.
//
// On Start it reads its settings as the stemcell's agent would: a v2 agent
// (StemcellAPIVersion ≥ 2) asks the metadata service for user-data and uses
// it when it holds agent_id, else follows it to the registry; a v1 agent
// asks the registry only. Settings are cached in var/vcap/bosh/settings.json
// and the cache is used when fetching fails. Persistent disk hints are kept
// in var/vcap/bosh/persistent_disk_hints.json as upstream keeps them.
//
// It answers the agent protocol (package mbus) on agent.<agent id>: ping,
// get_state, get_task, add_persistent_disk, remove_persistent_disk,
// mount_disk, unmount_disk, list_disk, add_dynamic_disk,
// remove_dynamic_disk and the cpilab extension dynamic_disk_usage. Any
// other method answers "unknown message <m>", as does every dynamic disk
// method in ModeOld. Mounts are only recorded (var/vcap/bosh/mounts.json);
// a dynamic disk is a symlink var/vcap/data/dynamic_disks/<disk cid> to the
// device as the guest sees it ("/dev/sdc").
//
// Device paths come from the identity, virtio, mapped or scsi resolver,
// which poll the root on the injected runtime's clock. All waiting goes
// through rt primitives, so an agent on mbus.Memory and the simulator's
// runtime replays exactly.
//
//	a, err := agent.Start(agent.Config{
//		Root:               "/data/vms/vm-1/root",
//		VMCID:              "vm-1",
//		MetadataURL:        fakeiaasURL + "/metadata",
//		RegistryURL:        fakeiaasURL + "/registry",
//		StemcellAPIVersion: 2,
//		DeviceResolver:     agent.ResolverVirtio,
//	})
//	if err != nil { … }
//	defer a.Stop()
package agent

// Package agent is cpilab's reference BOSH agent for fake VMs. It works on a
// VM root directory laid out as docs/seams.md says (dev/, sys/, var/vcap/…)
// and never reads or writes outside it.
//
// On Start it reads its settings as the stemcell's agent would: a v2 agent
// (StemcellAPIVersion ≥ 2) asks the metadata service for user-data and uses
// it when it holds agent_id, else follows it to the registry; a v1 agent
// asks the registry only. With Config.SettingsFile it reads only that file
// in the root, as bosh-agent's File settings source does on warden and
// docker stemcells (WardenSettingsFile, written by the Warden and Docker
// CPIs after the VM boots: Fleet.Start waits for it). Settings are cached in var/vcap/bosh/settings.json
// and the cache is used when fetching fails. Persistent disk hints are kept
// in var/vcap/bosh/persistent_disk_hints.json as upstream keeps them.
//
// It answers the agent protocol (package mbus) on agent.<agent id>: ping,
// get_state, get_task, add_persistent_disk, remove_persistent_disk,
// mount_disk, unmount_disk, list_disk, add_dynamic_disk,
// remove_dynamic_disk and the cpilab extension dynamic_disk_usage. Any
// other method answers "unknown message <m>", as does every dynamic disk
// method in ModeOld. Mounts are only recorded (var/vcap/bosh/mounts.json),
// except directory disks (Config.BindMountPersistentDisk: a Docker CPI's
// volume bound at /warden-cpi-dev/<disk>), which mount_disk binds at the
// mount point as a relative symlink, so the guest's files land on the disk.
// add_dynamic_disk reloads the settings, resolves the device and links
// var/vcap/data/dynamic_disks/<disk cid> (a 0700 directory) to it, relative
// to the link ("../../../../dev/sdc"); remove_dynamic_disk removes it.
//
// Device paths come from the resolvers bosh-agent's platform/provider.go
// builds (identity, virtio with its mapped fallback, scsi by id, volume_id
// or lun and host_device_id, iscsi), with upstream's time-outs on the
// injected runtime's clock. All waiting goes through rt primitives, so an
// agent on mbus.Memory and the simulator's runtime replays exactly.
//
// Every file operation stays inside the VM root whatever has been done to
// it over SFTP (package vmroot): the agent's own files are never reached
// through a symlink, and device look-ups follow links as the guest would,
// inside the root. Where cpilab deliberately differs from bosh-agent, a
// field of Knobs restores upstream's behaviour; docs/upstream.md lists them.
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

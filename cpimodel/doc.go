// Package cpimodel is a model of the CPI contract: the cloud as the contract
// sees it and what one CPI call may do to it. The cloud holds stemcells and
// their tags, VMs with their metadata, cloud_properties, networks, agent
// settings and attached disks, disks with their size, cloud_properties,
// metadata and attachment, and snapshots with their source disk.
//
// It is pure: no I/O, no clock, no goroutine. A caller reads the whole
// cloud before and after a call (State), parses the request and the
// response (ParseRequest, ParseResponse) and asks Check whether the cloud
// after the call is one of the legal next states. Legal gives the outcomes
// a call may have in a state: success with its effect, or the error types a
// caller tolerates, with the latitude the contract leaves (a disk size
// rounded up to whole GiB, NotSupported where the Director falls back,
// deletes of what is already gone, results no caller reads, metadata
// values a cloud sanitises).
//
// Every rule cites a clause of docs/contracts.md (the model.* family):
//
//   - model.effect: a successful call has its effect on the object it
//     names, and on no other object of the same kind.
//   - model.frame: a call changes nothing it was not asked to change.
//   - model.failed-call: a call that fails creates nothing and changes
//     nothing outside the objects it names.
//   - model.answers: answers agree with the cloud and with the request.
//   - model.registry: the agent settings in the registry follow the VM's
//     attachments and disappear with the VM.
package cpimodel

// Package csi is bosh-csi: a Container Storage Interface (CSI 1.x) driver
// over the BOSH Director's dynamic disks.
//
// The controller service turns CreateVolume, DeleteVolume,
// ControllerPublishVolume, ControllerUnpublishVolume and
// ControllerExpandVolume into Director dynamic disk calls (POST
// /dynamic_disks, DELETE /dynamic_disks/:name, POST …/attach, …/detach,
// …/resize); a volume's id is its disk's name. The node service waits for
// the agent's link of the attached disk (/var/vcap/data/dynamic_disks/<cid>),
// formats it only when blank and mounts it with k8s.io/mount-utils'
// SafeFormatAndMount, on the node or, with Config.Mounter "vmroot", on a
// cpilab VM root (the FlexVolume driver's VMRoot, reused).
//
// cmd/bosh-csi is Main. docs/csi.md describes the flags, the config, the
// StorageClass parameters and the deployment on Kubernetes.
package csi

// Package csisuite certifies a CSI driver: Kubernetes' csi-sanity, then
// cpilab's BOSH checks. csi-sanity is
// github.com/kubernetes-csi/csi-test/v5/pkg/sanity, run as it is. When the
// driver stores volumes as BOSH dynamic disks, cpilab's checks run against
// the embedded Director, agents and fake cloud (the oracle): which VM a disk
// is really attached to, which device a node mounted, whether data moves
// between nodes, what a Director outage gives, what the driver's credentials
// may do. Clause ids are in docs/contracts.md, final section. cpilab
// certify-csi runs it.
package csisuite

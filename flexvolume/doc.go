// Package flexvolume is a Kubernetes FlexVolume driver over BOSH dynamic
// disks, and the FlexVolume call protocol. The protocol is spoken as
// kubelet's code speaks it: call-out names, option keys, the one-JSON-object
// answer (ParseOutput, CheckExit, each protocol error its own value), and a
// Caller that runs any driver executable as kubelet does.
//
// The driver binary (cmd/bosh-flexvolume) is Main with a zero MainConfig:
//
//	func main() { flexvolume.Main(flexvolume.MainConfig{}) }
//
// It reads bosh-disk.json beside itself (Config), answers one call-out and
// exits. With Config.Mounter "vmroot" a node is a cpilab VM root (VMRoot):
// mkfs, blkid and mount are simulated on the disk's backing file so that
// k8s.io/mount-utils' SafeFormatAndMount runs unchanged. docs/flexvolume.md
// describes the call-outs, the config and the vmroot layout.
//
// Calling a driver:
//
//	c := flexvolume.NewCaller(flexvolume.CallerConfig{Executable: exe})
//	call := c.Run(ctx, flexvolume.CmdAttach, optionsJSON, "node-a")
//	if call.Err != nil { … } // a protocol error: errors.Is(call.Err, flexvolume.ErrNotOneJSONObject), …
//	if call.Result.Status != flexvolume.StatusSuccess { … }
package flexvolume

// Command bosh-flexvolume is a Kubernetes FlexVolume driver over the BOSH
// Director's dynamic disks. Install it as
// <plugindir>/cpilab~bosh-disk/bosh-disk with its config, bosh-disk.json,
// beside it (docs/flexvolume.md).
package main

import "github.com/cpilab/cpilab/flexvolume"

func main() { flexvolume.Main(flexvolume.MainConfig{}) }

// Command bosh-csi is a CSI driver over the BOSH Director's dynamic disks
// (package csi; docs/csi.md).
package main

import (
	"os"

	"github.com/cpilab/cpilab/csi"
)

func main() { os.Exit(csi.Main(os.Args[1:], os.Stderr, csi.Bugs{})) }

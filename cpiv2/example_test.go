package cpiv2_test

import (
	"context"
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
)

// A Go CPI served in process: the loopback sends exactly the bytes a runner
// would and decodes the answer as strictly.
func ExampleNewLoopback() {
	l := cpiv2.NewLoopback(newMemCPI(), cpiv2.LoopbackConfig{
		Profile:       cpiv2.ProfileCLI,
		MaxAPIVersion: 3,
		Trace: func(rec cpiv2.CallRecord) {
			fmt.Printf("%s %s api_version=%d\n", rec.Method, rec.RequestID, rec.APIVersion)
		},
	})
	ctx := context.Background()
	disk, _ := l.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 1024})
	hint, err := l.AttachDisk(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-1"), disk)
	fmt.Println(disk, hint.Path, err)
	// Output:
	// info cpi-000001 api_version=1
	// create_disk cpi-000002 api_version=2
	// attach_disk cpi-000003 api_version=2
	// disk1024-1 /dev/sdc <nil>
}

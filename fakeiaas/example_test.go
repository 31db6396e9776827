package fakeiaas_test

import (
	"fmt"

	"github.com/cpilab/cpilab/fakeiaas"
)

func ExampleParseRule() {
	r, err := fakeiaas.ParseRule(`op=attach_disk nth=2 effect=error type=DiskNotFound ok_to_retry=true message="disk went away"`)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Op, r.Nth, r.Effect.ErrorType, r.Effect.OkToRetry)
	fmt.Println(r)
	// Output:
	// attach_disk 2 Bosh::Clouds::DiskNotFound true
	// op=attach_disk nth=2 effect=error type=Bosh::Clouds::DiskNotFound ok_to_retry=true message="disk went away"
}

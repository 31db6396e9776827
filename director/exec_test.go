package director_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/director/lab"
)

// The director drives the reference CPI executable through cpiv2.Runner as
// it drives the in-process one (make test builds bin/fakeiaas-cpi first).
func TestProvideThroughTheCPIExecutable(t *testing.T) {
	bin, err := filepath.Abs("../bin/fakeiaas-cpi")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no %s (run make build): %v", bin, err)
	}
	w := newWorld(t, worldOpts{lab: func(c *lab.Config) { c.CPICommand = []string{bin} }})
	w.done(w.provide("x", 0))
	dd, _ := w.disk("x")
	vm := w.instance(0).VMCID
	if iaas, _ := w.iaasDisk(dd.CID); iaas.VMCID.String() != vm || !w.linked(vm, dd.CID) {
		t.Fatalf("through the executable: IaaS disk on %v, linked %v; want on %s and linked", iaas.VMCID, w.linked(vm, dd.CID), vm)
	}
	w.done(w.d.DetachDynamicDisk("admin", "x"))
	w.done(w.d.DeleteDynamicDisk("admin", "x"))
}

package cpisuite

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpimodel"
)

// observerCPI writes a CPI that answers has_vm true, get_disks ["d-1"] and
// has_disk with NotImplemented (a CPI that never implemented it).
func observerCPI(t *testing.T) string {
	t.Helper()
	script := `#!/bin/sh
req=$(cat)
case "$req" in
*'"method":"has_vm"'*) echo '{"result":true,"error":null,"log":""}' ;;
*'"method":"get_disks"'*) echo '{"result":["d-1"],"error":null,"log":""}' ;;
*'"method":"has_disk"'*) echo '{"result":null,"error":{"type":"Bosh::Clouds::NotImplemented","message":"has_disk","ok_to_retry":false},"log":""}' ;;
*) echo '{"result":null,"error":null,"log":""}' ;;
esac
`
	p := filepath.Join(t.TempDir(), "cpi")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestObserverShowsWhatTheReadsShow: the observer learns the CIDs a call
// names, shows the VMs has_vm finds with the disks get_disks lists, and
// names as unseen what the CPI cannot show (has_disk NotImplemented, and
// everything no read method shows); an unchanged view is read once.
func TestObserverShowsWhatTheReadsShow(t *testing.T) {
	o := observerFor([]string{observerCPI(t)}, Timeouts{Call: 20 * time.Second})
	req, _ := json.Marshal(map[string]any{"method": "attach_disk", "arguments": []string{"vm-1", "d-1"}})
	x := &Exchange{Method: "attach_disk", Request: req}
	o.calling(x, callNamed)
	s, err := o.ModelState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.VMs["vm-1"]; !ok || len(s.VMs) != 1 {
		t.Fatalf("VMs %v, want vm-1", s.VMs)
	}
	if _, ok := s.VMs["vm-1"].Disks["d-1"]; !ok {
		t.Errorf("vm-1's disks %v, want d-1 (get_disks)", s.VMs["vm-1"].Disks)
	}
	if len(s.Disks) != 0 || s.Sees(cpimodel.SeenDisks) || s.Sees(cpimodel.SeenAttachments) || !strings.Contains(s.Unseen[cpimodel.SeenDisks], "does not implement has_disk") {
		t.Errorf("disks %v, unseen %v: want disks unseen, saying has_disk is not implemented", s.Disks, s.Unseen)
	}
	for _, k := range []string{cpimodel.SeenStemcells, cpimodel.SeenSnapshots, cpimodel.SeenDetails} {
		if s.Sees(k) {
			t.Errorf("the view claims to show %s", k)
		}
	}
	if !s.Sees(cpimodel.SeenVMs) {
		t.Errorf("the view does not show VMs, though has_vm answers")
	}
	// Nothing ran since: the same view, no read made.
	n := o.reads.Load()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := o.ModelState(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if o.reads.Load() != n {
		t.Errorf("an unchanged view was read again (%d reads, then %d)", n, o.reads.Load())
	}
	o.calling(x, callRunning)
	if _, err := o.ModelState(context.Background()); err != nil || o.reads.Load() == n {
		t.Errorf("a call ran and the view was not read again (err %v)", err)
	}
}

package fakeiaas_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/rt"
)

// TestRestartNeverReplacesObjects restarts a durable cloud on the same data
// dir many times, with the same runtime seed each time (as `cpilab fakeiaas`
// did), and creates a stemcell, a VM, a disk and a snapshot after each
// start. Nothing created before may be replaced, and no disk's backing file
// may lose the bytes written to it.
func TestRestartNeverReplacesObjects(t *testing.T) {
	const restarts = 25
	dir := t.TempDir()
	type kept struct {
		disk   fakeiaas.Disk
		marker []byte
	}
	var stemcells []fakeiaas.Stemcell
	var vms []fakeiaas.VM
	var disks []kept
	var snaps []fakeiaas.Snapshot
	seen := map[string]bool{}
	for i := range restarts {
		c, err := fakeiaas.New(fakeiaas.Config{DataDir: dir, Runtime: rt.Real(0)})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		sc := mustStemcell(t, c, 2)
		vm := mustVM(t, c, sc, nil)
		d := mustDisk(t, c, 1)
		marker := []byte("disk written at start " + filepath.Base(d.CID.String()))
		if err := os.WriteFile(c.DiskFile(d.CID), marker, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(c.DiskFile(d.CID), 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.VMRoot(vm.CID), "var/vcap/store/owner"), []byte(vm.CID.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		snap, err := c.SnapshotDisk(bg, d.CID, cpiv2.Metadata{"start": vm.CID.String()})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{sc.CID.String(), vm.CID.String(), d.CID.String(), snap.CID.String()} {
			if seen[id] {
				t.Fatalf("start %d: CID %s was handed out before", i, id)
			}
			seen[id] = true
		}
		stemcells, vms, snaps = append(stemcells, sc), append(vms, vm), append(snaps, snap)
		disks = append(disks, kept{d, marker})

		// Everything created so far is still there, as it was.
		st, err := c.State(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Stemcells) != i+1 || len(st.VMs) != i+1 || len(st.Disks) != i+1 || len(st.Snapshots) != i+1 {
			t.Fatalf("start %d: %d stemcells, %d VMs, %d disks, %d snapshots; want %d of each",
				i, len(st.Stemcells), len(st.VMs), len(st.Disks), len(st.Snapshots), i+1)
		}
		for _, want := range stemcells {
			got, err := c.Stemcell(bg, want.CID)
			if err != nil || !got.Created.Equal(want.Created) {
				t.Fatalf("start %d: stemcell %s replaced or lost: %+v, %v", i, want.CID, got, err)
			}
		}
		for _, want := range vms {
			got, err := c.VM(bg, want.CID)
			if err != nil || !got.Created.Equal(want.Created) {
				t.Fatalf("start %d: VM %s replaced or lost: %+v, %v", i, want.CID, got, err)
			}
			owner, err := os.ReadFile(filepath.Join(got.Root, "var/vcap/store/owner"))
			if err != nil || string(owner) != want.CID.String() {
				t.Fatalf("start %d: VM %s root reused or lost: %q, %v", i, want.CID, owner, err)
			}
		}
		for _, want := range disks {
			got, err := c.Disk(bg, want.disk.CID)
			if err != nil || !got.Created.Equal(want.disk.Created) {
				t.Fatalf("start %d: disk %s replaced or lost: %+v, %v", i, want.disk.CID, got, err)
			}
			data, err := os.ReadFile(c.DiskFile(want.disk.CID))
			if err != nil || len(data) != 1<<20 || !bytes.HasPrefix(data, want.marker) {
				t.Fatalf("start %d: backing file of disk %s truncated or overwritten (%d bytes, %v)", i, want.disk.CID, len(data), err)
			}
		}
		for _, want := range st.Snapshots {
			if want.Metadata["start"] == "" {
				t.Fatalf("start %d: snapshot %s lost its metadata", i, want.CID)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	_ = snaps
}

// TestMemoryStoreCIDsAreDeterministic: the simulator's cloud (memory store,
// seeded runtime) hands out the same CIDs for the same seed.
func TestMemoryStoreCIDsAreDeterministic(t *testing.T) {
	run := func(seed uint64) []string {
		c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: "memory", Runtime: rt.Real(seed)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sc := mustStemcell(t, c, 2)
		vm := mustVM(t, c, sc, nil)
		d := mustDisk(t, c, 1)
		return []string{sc.CID.String(), vm.CID.String(), d.CID.String()}
	}
	a, b, other := run(42), run(42), run(43)
	if len(a) != 3 || a[0] != b[0] || a[1] != b[1] || a[2] != b[2] {
		t.Errorf("seed 42 gave %v then %v; want the same CIDs", a, b)
	}
	if a[2] == other[2] {
		t.Errorf("seeds 42 and 43 gave the same disk CID %s", a[2])
	}
}

// TestCreateRefusesLeftoverFiles: a disk backing file or VM directory that
// the cloud does not know about, at the very path the next CID would take,
// is not reused; the cloud draws another CID.
func TestCreateRefusesLeftoverFiles(t *testing.T) {
	// Learn the first CIDs a memory cloud with seed 9 draws.
	probe, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: "memory", Runtime: rt.Real(9)})
	if err != nil {
		t.Fatal(err)
	}
	sc := mustStemcell(t, probe, 2)
	firstDisk := mustDisk(t, probe, 1)
	probe.Close()

	dir := t.TempDir()
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: dir, Store: "memory", Runtime: rt.Real(9)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := mustStemcell(t, c, 2); got.CID != sc.CID {
		t.Fatalf("stemcell %s, want %s (same seed)", got.CID, sc.CID)
	}
	// Something else put a file where the next disk would go.
	squatter := c.DiskFile(firstDisk.CID)
	if err := os.WriteFile(squatter, []byte("someone's data"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := mustDisk(t, c, 1)
	if d.CID == firstDisk.CID {
		t.Fatalf("create_disk reused %s whose backing file already existed", d.CID)
	}
	if b, _ := os.ReadFile(squatter); string(b) != "someone's data" {
		t.Errorf("the existing file was changed: %q", b)
	}
}

// TestStoreRefusesReplacingCreate: the store itself refuses a create over an
// existing record with a typed error, whatever the engine believed.
func TestStoreRefusesReplacingCreate(t *testing.T) {
	for _, store := range []string{"memory", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: store})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			d := mustDisk(t, c, 1)
			err = fakeiaas.CreateRecordTwice(c, d.CID.String())
			var re *fakeiaas.RecordExistsError
			if !errors.Is(err, fakeiaas.ErrExists) || !errors.As(err, &re) || re.ID != d.CID.String() {
				t.Fatalf("second create of %s: err = %v, want a *RecordExistsError matching ErrExists", d.CID, err)
			}
			got, err := c.Disk(bg, d.CID)
			if err != nil || got.SizeMiB != 1 {
				t.Errorf("disk after the refused create: %+v, %v", got, err)
			}
		})
	}
}

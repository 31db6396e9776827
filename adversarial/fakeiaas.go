package adversarial

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cpilab/cpilab/fakeiaas"
)

// canary is written into every acknowledged disk and VM root; it must read
// back unchanged at the end, across restarts.
const canaryOffset = 4096

func canary(cid string) []byte { return []byte("cpilab adversarial canary of " + cid) }

// fakeWorld is fakeiaas on a durable (SQLite) data dir, served on loopback
// through a panic counter, restartable.
type fakeWorld struct {
	e       *env
	dataDir string
	cloud   *fakeiaas.Cloud
	g       *guarded
	url     string
	close   func() error
	p       *probe

	mu    sync.Mutex      // guards seen and disks (concurrent creates)
	seen  map[string]bool // every CID ever handed out
	disks []fakeiaas.Disk // acknowledged disks
	vm    fakeiaas.VM     // an acknowledged VM
	att   string          // the disk attached to vm
}

func (w *fakeWorld) start() error {
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: w.dataDir, Store: "sqlite"})
	if err != nil {
		return err
	}
	w.cloud = c
	w.g = &guarded{h: c.Handler(), plantPanic: w.e.planted[OracleCrash]}
	url, closeFn, err := serveHTTP(w.g)
	if err != nil {
		_ = c.Close()
		return err
	}
	c.SetBaseURL(url)
	w.url, w.close = url, closeFn
	w.p = &probe{client: &http.Client{Transport: &http.Transport{}}, base: url}
	return nil
}

func (w *fakeWorld) stop() error {
	if w.cloud == nil {
		return nil
	}
	w.p.client.CloseIdleConnections()
	err := errors.Join(w.close(), w.cloud.Close())
	w.cloud = nil
	return err
}

// call makes one API call that must succeed.
func (w *fakeWorld) call(ctx context.Context, op fakeiaas.Op, body any) (json.RawMessage, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	r := w.p.do(ctx, http.MethodPost, "/api/v1/"+string(op), nil, b)
	if r.err != nil || r.status != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d %s %v", op, r.status, r.body, r.err)
	}
	var out struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out.Result, nil
}

// createDisk creates an acknowledged disk with its canary; a CID handed
// out before is data lost (the create replaced an object).
func (w *fakeWorld) createDisk(ctx context.Context, t *tally, input string) error {
	w.mu.Lock()
	size := 1 + len(w.disks)%4
	w.mu.Unlock()
	res, err := w.call(ctx, fakeiaas.OpCreateDisk, map[string]any{"size_mib": size})
	if err != nil {
		return err
	}
	var d fakeiaas.Disk
	if err := json.Unmarshal(res, &d); err != nil {
		return err
	}
	w.mu.Lock()
	dup := w.seen[d.CID.String()]
	w.seen[d.CID.String()] = true
	w.mu.Unlock()
	if dup {
		t.add(OracleDataLost, input, "create_disk handed out %s again", d.CID)
		return nil
	}
	f, err := os.OpenFile(w.cloud.DiskFile(d.CID), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(canary(d.CID.String()), canaryOffset)
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	w.mu.Lock()
	w.disks = append(w.disks, d)
	w.mu.Unlock()
	return nil
}

// setup makes the acknowledged objects: a stemcell, a VM with a canary in
// its root, disks with canaries, one of them attached.
func (w *fakeWorld) setup(ctx context.Context, t *tally) error {
	res, err := w.call(ctx, fakeiaas.OpCreateStemcell, map[string]any{"image_path": "/adversarial/image",
		"image": map[string]any{"name": "adversarial", "version": "1", "api_version": 2}})
	if err != nil {
		return err
	}
	var sc fakeiaas.Stemcell
	if err := json.Unmarshal(res, &sc); err != nil {
		return err
	}
	if res, err = w.call(ctx, fakeiaas.OpCreateVM, map[string]any{"agent_id": "adversarial-agent", "stemcell_cid": sc.CID}); err != nil {
		return err
	}
	if err := json.Unmarshal(res, &w.vm); err != nil {
		return err
	}
	w.seen[sc.CID.String()], w.seen[w.vm.CID.String()] = true, true
	if err := os.WriteFile(filepath.Join(w.cloud.VMRoot(w.vm.CID), "var/vcap/store/canary"), canary(w.vm.CID.String()), 0o644); err != nil {
		return err
	}
	for range 3 {
		if err := w.createDisk(ctx, t, "setup"); err != nil {
			return err
		}
	}
	w.att = w.disks[0].CID.String()
	_, err = w.call(ctx, fakeiaas.OpAttachDisk, map[string]any{"vm_cid": w.vm.CID, "disk_cid": w.att})
	return err
}

// verify is the data-lost oracle: every acknowledged object is there,
// unchanged, with its canary.
func (w *fakeWorld) verify(ctx context.Context, t *tally, input string) {
	vm, err := w.cloud.VM(ctx, w.vm.CID)
	if err != nil {
		t.add(OracleDataLost, input, "acknowledged VM %s: %v", w.vm.CID, err)
	} else if len(vm.Attachments) != 1 || vm.Attachments[0].DiskCID.String() != w.att {
		t.add(OracleDataLost, input, "VM %s's attachments changed: %+v, want %s only", w.vm.CID, vm.Attachments, w.att)
	}
	if b, err := os.ReadFile(filepath.Join(w.cloud.VMRoot(w.vm.CID), "var/vcap/store/canary")); err != nil || !bytes.Equal(b, canary(w.vm.CID.String())) {
		t.add(OracleDataLost, input, "VM %s's root lost its canary: %q, %v", w.vm.CID, b, err)
	}
	for _, d := range w.disks {
		got, err := w.cloud.Disk(ctx, d.CID)
		if err != nil {
			t.add(OracleDataLost, input, "acknowledged disk %s: %v", d.CID, err)
			continue
		}
		if got.SizeMiB != d.SizeMiB {
			t.add(OracleDataLost, input, "disk %s is %d MiB, was %d", d.CID, got.SizeMiB, d.SizeMiB)
		}
		f, err := os.Open(w.cloud.DiskFile(d.CID))
		if err != nil {
			t.add(OracleDataLost, input, "disk %s's backing file: %v", d.CID, err)
			continue
		}
		buf := make([]byte, len(canary(d.CID.String())))
		_, err = f.ReadAt(buf, canaryOffset)
		fi, serr := f.Stat()
		_ = f.Close()
		if err != nil || !bytes.Equal(buf, canary(d.CID.String())) {
			t.add(OracleDataLost, input, "disk %s lost its canary: %q, %v", d.CID, buf, err)
		}
		if serr == nil && fi.Size() != int64(d.SizeMiB)<<20 {
			t.add(OracleDataLost, input, "disk %s's backing file is %d bytes, want %d", d.CID, fi.Size(), int64(d.SizeMiB)<<20)
		}
	}
}

// fakeClear: a clear fakeiaas refusal carries an error message (API) or a
// status (registry).
func fakeClear(r reply) bool {
	var b struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Status string `json:"status"`
	}
	if json.Unmarshal(r.body, &b) != nil {
		return isMuxNotFound(r)
	}
	return (b.Error != nil && b.Error.Message != "") || b.Status == "not_found" || b.Status == "access_denied"
}

var fakeOps = []fakeiaas.Op{
	fakeiaas.OpCreateStemcell, fakeiaas.OpDeleteStemcell, fakeiaas.OpGetStemcell, fakeiaas.OpCreateVM, fakeiaas.OpDeleteVM,
	fakeiaas.OpGetVM, fakeiaas.OpRebootVM, fakeiaas.OpSetVMMetadata, fakeiaas.OpCreateDisk, fakeiaas.OpDeleteDisk,
	fakeiaas.OpGetDisk, fakeiaas.OpAttachDisk, fakeiaas.OpDetachDisk, fakeiaas.OpSetDiskMetadata, fakeiaas.OpGetDisks,
	fakeiaas.OpResizeDisk, fakeiaas.OpUpdateDisk, fakeiaas.OpSnapshotDisk, fakeiaas.OpDeleteSnapshot,
}

// cidOps take {"cid": …}.
var cidOps = []fakeiaas.Op{fakeiaas.OpDeleteStemcell, fakeiaas.OpGetStemcell, fakeiaas.OpDeleteVM, fakeiaas.OpGetVM,
	fakeiaas.OpRebootVM, fakeiaas.OpGetDisk, fakeiaas.OpDeleteDisk, fakeiaas.OpGetDisks, fakeiaas.OpSnapshotDisk, fakeiaas.OpDeleteSnapshot}

// hostileCID turns a hostile name into a CID-shaped attack on an
// acknowledged object: the real CID with something around it.
func (w *fakeWorld) hostileCID(name string) string {
	d := w.disks[w.e.rng.IntN(len(w.disks))].CID.String()
	if name == "" {
		name = "x" // never the CID itself: deleting an acknowledged disk is no attack
	}
	switch w.e.rng.IntN(4) {
	case 0:
		return d + "/" + name
	case 1:
		return name + d
	case 2:
		return "../disks/" + d + ".img"
	}
	return name
}

func runFakeIaaS(ctx context.Context, e *env, t *tally, n int) error {
	w := &fakeWorld{e: e, dataDir: filepath.Join(e.dir, "data"), seen: map[string]bool{}}
	if err := w.start(); err != nil {
		return err
	}
	defer func() { _ = w.stop() }()
	if err := w.setup(ctx, t); err != nil {
		return err
	}
	outside, err := hashTree(e.outside, "")
	if err != nil {
		return err
	}
	r := e.rng
	bodies := hostileBodies(r)
	restartEvery := max(n/6, 5)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t.tried()
		var input string
		switch {
		case i%restartEvery == restartEvery-1:
			// A clean restart, then creates: no ID handed out twice, no
			// acknowledged object replaced.
			input = "restart, then create_disk ×3"
			if err := w.stop(); err != nil {
				t.add(OracleCrash, input, "close: %v", err)
			}
			if err := w.start(); err != nil {
				return fmt.Errorf("restart: %w", err)
			}
			for range 3 {
				if err := w.createDisk(ctx, t, input); err != nil {
					t.add(OracleCrash, input, "create after restart: %v", err)
				}
			}
			w.verify(ctx, t, input)
		case i%restartEvery == restartEvery/2:
			// Concurrent duplicate creates: every CID distinct.
			input = "8 concurrent create_disk"
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := w.createDisk(ctx, t, input); err != nil {
						t.add(OracleCrash, input, "%v", err)
					}
				}()
			}
			wg.Wait()
		default:
			input = w.hostileRequest(ctx, t, i, bodies)
		}
		outside = e.checkOutside(t, input, outside)
	}
	if e.planted[OracleCrash] {
		t.tried()
		rep := w.p.do(ctx, http.MethodPost, "/api/v1/get_vm", map[string]string{"X-Cpilab-Plant": "panic"}, []byte(`{"cid":"x"}`))
		judge(t, "planted panic", rep, true, fakeClear)
	}
	if e.planted[OracleDataLost] {
		d := w.disks[len(w.disks)-1]
		_ = os.WriteFile(w.cloud.DiskFile(d.CID), []byte("planted overwrite"), 0o644)
	}
	if e.planted[OracleEscape] {
		// A writer that follows a link out of the VM root, as fakeiaas
		// would if it wrote with plain host calls.
		link := filepath.Join(w.cloud.VMRoot(w.vm.CID), "var/vcap/bosh/planted")
		_ = os.Symlink(filepath.Join(e.outside, "file"), link)
		_ = os.WriteFile(link, []byte("planted escape"), 0o644)
		outside = e.checkOutside(t, "planted escaping writer", outside)
	}
	if e.planted[OracleLeak] {
		stop := make(chan struct{})
		go func() { <-stop }() // a planted goroutine leak, released after the check
		e.release = append(e.release, func() { close(stop) })
	}
	w.verify(ctx, t, "end of area")
	if g := w.g.panics.Load(); g > 0 {
		w.g.mu.Lock()
		t.add(OracleCrash, "the whole area", "%d handler panics, the last: %s", g, w.g.last)
		w.g.mu.Unlock()
	}
	if err := w.stop(); err != nil {
		return err
	}
	return os.RemoveAll(w.dataDir)
}

// hostileRequest sends one hostile request chosen by the seed and judges
// it; it returns the input's description.
func (w *fakeWorld) hostileRequest(ctx context.Context, t *tally, i int, bodies [][]byte) string {
	r := w.e.rng
	name := pick(r, hostileNames)
	var method, path, input string
	var body []byte
	switch r.IntN(10) {
	case 0:
		method, path = http.MethodPost, "/api/v1/"+pathSegment(name)
		body, input = []byte("{}"), "unknown operation "+name
	case 1, 2:
		op := pick(r, fakeOps)
		method, path, body = http.MethodPost, "/api/v1/"+string(op), pick(r, bodies)
		input = fmt.Sprintf("%s with body %.60q", op, body)
	case 3:
		op := pick(r, cidOps)
		cid := w.hostileCID(name)
		method, path, body = http.MethodPost, "/api/v1/"+string(op), mustJSON(map[string]any{"cid": cid})
		input = fmt.Sprintf("%s of cid %q", op, cid)
	case 4:
		op := pick(r, []fakeiaas.Op{fakeiaas.OpAttachDisk, fakeiaas.OpDetachDisk})
		vm, d := w.vm.CID.String(), w.hostileCID(name)
		if r.IntN(2) == 0 {
			vm, d = w.hostileCID(name), w.disks[1+r.IntN(len(w.disks)-1)].CID.String()
			vm = strings.Replace(vm, "disk-", "vm-", 1)
		}
		method, path, body = http.MethodPost, "/api/v1/"+string(op), mustJSON(map[string]any{"vm_cid": vm, "disk_cid": d})
		input = fmt.Sprintf("%s vm %q disk %q", op, vm, d)
	case 5:
		size := pick(r, []any{0, -1, 1 << 62, 1 << 44, fakeiaas.MaxDiskSizeMiB + 1, "4", 4.5, nil, true, []int{1}, map[string]int{"a": 1}, 1e300})
		op := pick(r, []fakeiaas.Op{fakeiaas.OpCreateDisk, fakeiaas.OpResizeDisk, fakeiaas.OpUpdateDisk})
		d := w.disks[1+r.IntN(len(w.disks)-1)].CID.String()
		switch op {
		case fakeiaas.OpCreateDisk:
			body = mustJSON(map[string]any{"size_mib": size})
		case fakeiaas.OpResizeDisk:
			body = mustJSON(map[string]any{"cid": d, "size_mib": size})
		default:
			body = mustJSON(map[string]any{"disk_cid": d, "new_size_mib": size})
		}
		method, path, input = http.MethodPost, "/api/v1/"+string(op), fmt.Sprintf("%s size %v", op, size)
	case 6:
		meta := oversizedMetadata(r, fakeiaas.MaxMetadataEntries, fakeiaas.MaxMetadataKeyBytes, fakeiaas.MaxMetadataValueBytes)
		op := pick(r, []fakeiaas.Op{fakeiaas.OpSetDiskMetadata, fakeiaas.OpSetVMMetadata, fakeiaas.OpSnapshotDisk})
		cid := w.disks[r.IntN(len(w.disks))].CID.String()
		if op == fakeiaas.OpSetVMMetadata {
			cid = w.vm.CID.String()
		}
		method, path, body = http.MethodPost, "/api/v1/"+string(op), mustJSON(map[string]any{"cid": cid, "metadata": meta})
		input = fmt.Sprintf("%s with metadata past a bound (%d entries)", op, len(meta))
	case 7:
		seg := pathSegment(name)
		switch r.IntN(3) {
		case 0:
			method, path, body = http.MethodPut, "/registry/instances/"+seg+"/settings", pick(r, bodies)
		case 1:
			method, path = http.MethodGet, "/metadata/"+seg+"/user-data"
		default:
			method, path = http.MethodGet, "/registry/instances/"+seg+"/settings"
		}
		if name == "" {
			path = strings.Replace(path, "//", "/x%00/", 1)
		}
		input = fmt.Sprintf("%s %.80s", method, path)
	case 8:
		switch r.IntN(3) {
		case 0:
			method, path, body = http.MethodPost, "/faults", []byte(name+" "+string(pick(r, bodies)))
			input = fmt.Sprintf("fault rule %.60q", body)
		case 1:
			method, path = http.MethodGet, "/oracle/history?limit="+pathSegment(name)+"x"
			input = "oracle history limit " + name
		default:
			method, path = http.MethodDelete, "/faults/"+pathSegment(name)+"-none"
			input = "delete fault rule " + name
		}
	default:
		if i%40 == 9 {
			method, path, body = http.MethodPost, "/api/v1/"+string(pick(r, fakeOps)), hugeBody()
			input = "a 32 MiB body"
		} else {
			method, path, body = http.MethodPost, "/api/v1/"+string(fakeiaas.OpCreateVM),
				mustJSON(map[string]any{"agent_id": name + "\x00", "stemcell_cid": "sc-" + name})
			input = fmt.Sprintf("create_vm agent %q", name)
		}
	}
	mustRefuse := true
	if method == http.MethodPut && json.Valid(body) && bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		mustRefuse = false // the registry keeps settings for any instance id, as upstream's does
	}
	rep := w.p.do(ctx, method, path, nil, body)
	judge(t, input, rep, mustRefuse, fakeClear)
	if path == "/faults" && rep.status == http.StatusOK {
		_ = w.p.do(ctx, http.MethodDelete, "/faults", nil, nil) // a rule that parsed must not pause the rest
	}
	return input
}

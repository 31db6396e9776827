package simulator

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/store"
)

// Control tests for the quiescent checkers (no leak, records, liveness):
// each plants a Director whose store, read directly, looks right, while
// what its user sees (its HTTP API, its tasks, the cloud's oracle) shows
// the bug. A checker that read the store would pass each one.

// hideDisk answers GET /dynamic_disks without the disk named name.
func hideDisk(name string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != "/dynamic_disks" {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			var disks []director.DiskInfo
			if err := json.Unmarshal(rec.Body.Bytes(), &disks); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			disks = slices.DeleteFunc(disks, func(d director.DiskInfo) bool { return d.Name == name })
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(disks)
		})
	}
}

// A Director that records a disk but never lists it: its store holds the
// record, GET /dynamic_disks leaves it out. no-leaked-disk fires.
func TestLeakCheckDecidesFromTheAPI(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=d vm=0", "c0 detach disk=d")
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, SkipLinearizability: true,
		tamper: tamper{api: hideDisk("d")}}
	var stored int
	cfg.tamper.afterOp = func(w *World, o Op) {
		stored = len(storeRecords[director.DynamicDisk](t, w, store.DynamicDisks))
	}
	o := Simulate(cfg)
	if stored != 1 {
		t.Fatalf("the planted Director's store holds %d dynamic disks, want 1 (the control proves nothing)", stored)
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvNoLeak || !strings.Contains(v.Err.Error(), "neither GET /dynamic_disks") {
		t.Fatalf("a disk recorded but never listed: got %v, want %s", o.Err, InvNoLeak)
	}
	cfg.tamper = tamper{}
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("the same run with an honest API: %v", o.Err)
	}
}

// A Director that, after an OK provide, detaches the disk behind its
// client's back and records it detached: its store agrees with the IaaS
// and the agent has no link left to miss, but the provide's answer (the
// workload's promise) no longer holds. director-records-match-iaas fires.
func TestRecordsCheckKeepsTheWorkloadsPromise(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=d vm=0")
	undone := 0
	undo := func(w *World, o Op) {
		if o.Kind != OpProvide {
			return
		}
		st, err := w.Cloud.State(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		for _, vm := range st.VMs {
			for _, d := range vm.Disks {
				if err := w.Cloud.DetachDisk(context.Background(), vm.CID, d); err != nil {
					t.Error(err)
				}
				if r, err := w.Cloud.Files().Open(vm.Root); err == nil {
					_ = r.Remove(agent.DynamicDiskLink(d.String()))
					r.Close()
				}
				undone++
			}
		}
		markDetached(t, w, "")
	}
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, SkipLinearizability: true, tamper: tamper{afterOp: undo}}
	o := Simulate(cfg)
	if undone != 1 {
		t.Fatalf("the planted Director undid %d attachments, want 1", undone)
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvRecords || !strings.Contains(v.Err.Error(), "the last operation on d, a provide") {
		t.Fatalf("an OK provide silently undone: got %v, want %s naming the promise", o.Err, InvRecords)
	}
}

// A Director whose task hangs in attach_disk and whose store forgets the
// task: the store lists no open task, but the task the workload was given
// never ends as GET /tasks/:id shows it. task-liveness fires.
func TestLivenessCheckDecidesFromTheTasksGiven(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=d vm=0")
	forgot := 0
	hang := func(w *World, method string) {
		if method != cpiv2.MethodAttachDisk {
			return
		}
		for _, tk := range storeRecords[director.Task](t, w, store.Tasks) {
			if tk.State.Final() {
				continue
			}
			if err := w.Store.Update(func(tx store.Tx) error { return tx.Delete(store.Tasks, store.IDKey(tk.ID)) }); err != nil {
				t.Error(err)
			}
			forgot++
		}
		w.never.Wait(0)
	}
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, SkipLinearizability: true, tamper: tamper{beforeCPI: hang}}
	o := Simulate(cfg)
	if forgot != 1 {
		t.Fatalf("the planted Director forgot %d tasks, want 1", forgot)
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvLiveness || !strings.Contains(v.Err.Error(), "c0 provide disk=d vm=0") {
		t.Fatalf("a hung task the store forgot: got %v, want %s naming the workload's task", o.Err, InvLiveness)
	}
}

// The checkers take no value from the Director's store: outside world.go
// (which hands the store to each director generation) no non-test file of
// the package names the store package or the World's Store field, and in
// world.go only the functions that wire the director do.
func TestCheckersTakeNoValueFromTheStore(t *testing.T) {
	allowed := map[string]bool{"NewWorld": true, "World.startDirector": true, "type World": true}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		storePkg := ""
		for _, im := range f.Imports {
			if im.Path.Value == `"github.com/cpilab/cpilab/director/store"` {
				storePkg = "store"
				if im.Name != nil {
					storePkg = im.Name.Name
				}
			}
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			where := "a declaration"
			if g, isGen := decl.(*ast.GenDecl); isGen && g.Tok == token.TYPE && len(g.Specs) == 1 {
				where = "type " + g.Specs[0].(*ast.TypeSpec).Name.Name
			}
			if ok {
				where = fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					var b bytes.Buffer
					typ := fn.Recv.List[0].Type
					if s, ok := typ.(*ast.StarExpr); ok {
						typ = s.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						b.WriteString(id.Name + ".")
					}
					where = b.String() + where
				}
			}
			if name == "world.go" && allowed[where] {
				continue
			}
			called := map[ast.Expr]bool{} // x.Store(…) is a method call (atomic stores), not the field
			ast.Inspect(decl, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.CallExpr:
					called[x.Fun] = true
				case *ast.SelectorExpr:
					if called[x] {
						return true
					}
					if id, ok := x.X.(*ast.Ident); ok && storePkg != "" && id.Name == storePkg {
						t.Errorf("%s: %s uses %s.%s: the checkers must not read the Director's store", fset.Position(x.Pos()), where, storePkg, x.Sel.Name)
					}
					if x.Sel.Name == "Store" {
						t.Errorf("%s: %s uses .Store: the checkers must not read the Director's store", fset.Position(x.Pos()), where)
					}
				}
				return true
			})
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d files: the guard looked in the wrong directory", checked)
	}
}

// staleVM plants a Director that attaches each disk to the first VM it
// ever attached one to: a provide that waited behind a recreate attaches
// to the VM it looked up before the wait, which the recreate deleted.
func staleVM() func(w *World, vm, disk string) string {
	first := ""
	return func(_ *World, vm, _ string) string {
		if first == "" {
			first = vm
		}
		return first
	}
}

// A Director that fails a provide that waited behind a recreate leaves
// nothing inconsistent (records, links, leaks all agree), yet the same
// provide succeeds on the reference Director: every-failure-explained
// names the task, its error and the recreate it overlapped.
func TestUnexplainedFailureOfAProvideBehindARecreate(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=a vm=0", "c1 recreate vm=0 delay=2s", "c0 provide disk=b vm=0 delay=1100ms")
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true}
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("the reference Director: %v\n%s", o.Err, strings.Join(o.Log, "\n"))
	}
	cfg.tamper = tamper{attachVM: staleVM()}
	o := Simulate(cfg)
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvExplained {
		t.Fatalf("a provide failed behind a recreate: got %v, want %s\n%s", o.Err, InvExplained, strings.Join(o.Log, "\n"))
	}
	t.Log(v.Err)
	for _, want := range []string{"(c0 provide disk=b vm=0", "not found", "c1 recreate vm=0"} {
		if !strings.Contains(v.Err.Error(), want) {
			t.Errorf("the violation does not name %q: %v", want, v.Err)
		}
	}
}

// A Director whose attach_disk stalls for 25 minutes with no fault on its
// path still ends every task (liveness holds), but the provide outlasts its
// client's 20-minute wait: provide-progress fires, with the bound printed.
func TestProgressCheckBoundsAProvide(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=d vm=0")
	stalled := 0
	stall := func(w *World, method string) {
		if method == cpiv2.MethodAttachDisk && stalled == 0 {
			stalled++
			w.s.Sleep(25 * time.Minute)
		}
	}
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, SkipLinearizability: true, tamper: tamper{beforeCPI: stall}}
	o := Simulate(cfg)
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvProgress || !strings.Contains(v.Err.Error(), "did not end within 20m0s of simulated time") {
		t.Fatalf("a provide stalled past its client's wait: got %v, want %s with the bound", o.Err, InvProgress)
	}
}

// A record a task leaves wrong and a later operation mends passes the
// quiescent checks; the idle check, run whenever the workload waits on
// nothing, sees it in between. The planted fault: after an unrelated
// restart, the disk a provide attached is detached behind the Director's
// back, so its API still lists the disk on the instance; the detach that
// follows finds it detached (DiskNotAttached) and the end agrees again.
func TestIdleCheckSeesARecordMendedLater(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=a vm=0", "c0 restart vm=1", "c0 detach disk=a")
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true}
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("the reference Director: %v\n%s", o.Err, strings.Join(o.Log, "\n"))
	}
	detachBehind := func(w *World, o Op) {
		if o.Kind != OpRestart {
			return
		}
		st, err := w.Cloud.State(context.Background())
		if err != nil {
			t.Errorf("oracle: %v", err)
			return
		}
		for _, d := range st.Disks {
			if !d.VMCID.IsZero() {
				if err := w.Cloud.DetachDisk(context.Background(), d.VMCID, d.CID); err != nil {
					t.Errorf("detaching %s behind the Director: %v", d.CID, err)
				}
			}
		}
	}
	cfg.tamper = tamper{afterOp: detachBehind}
	idle := Simulate(cfg)
	v, ok := AsViolation(idle.Err)
	if !ok || v.Invariant != InvRecords || v.Phase != WhenIdle || v.Step != 2 {
		t.Fatalf("a record left wrong after step 2: got %v, want %s %s 2\n%s", idle.Err, InvRecords, WhenIdle, strings.Join(idle.Log, "\n"))
	}
	if !strings.Contains(v.Err.Error(), "the IaaS has it attached to \"\"") {
		t.Errorf("the violation does not say what the IaaS has: %v", v.Err)
	}
	for _, x := range idle.Violations {
		if x.Phase != WhenIdle {
			t.Errorf("the end agrees again, yet %v", x)
		}
	}
}

package cpimodel

import (
	"encoding/json"
	"strings"
	"testing"
)

func base() State {
	s := Empty()
	s.Stemcells["sc-1"] = Stemcell{CID: "sc-1", APIVersion: 2}
	s.VMs["vm-1"] = VM{CID: "vm-1", AgentID: "a1", Stemcell: "sc-1", Metadata: map[string]string{"name": "x"},
		Disks: map[string]Attachment{"d-1": {Device: "sdc", LUN: 2}, "d-2": {Device: "sdd", LUN: 3}}, Boots: 1}
	s.VMs["vm-2"] = VM{CID: "vm-2", AgentID: "a2", Stemcell: "sc-1", Disks: map[string]Attachment{}, Boots: 1}
	s.Disks["d-1"] = Disk{CID: "d-1", SizeMiB: 1024, AttachedTo: "vm-1"}
	s.Disks["d-2"] = Disk{CID: "d-2", SizeMiB: 1024, AttachedTo: "vm-1"}
	s.Disks["d-3"] = Disk{CID: "d-3", SizeMiB: 2048}
	s.Snapshots["sn-1"] = Snapshot{CID: "sn-1", Disk: "d-3"}
	s.Registry["vm-1"] = Settings{Raw: json.RawMessage(`{"disks":{"persistent":{"d-1":{},"d-2":{}}}}`)}
	return s
}

func call(method string, args ...any) Call {
	c := Call{Method: method, APIVersion: 2, StemcellAPIVersion: 1}
	for _, a := range args {
		b, _ := json.Marshal(a)
		c.Args = append(c.Args, b)
	}
	return c
}

func ok(v any) Result { b, _ := json.Marshal(v); return Result{Value: b} }

// TestCheck: each rule of the model, with an outcome it allows and one it
// does not, naming the clause, object and field.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Call
		r    Result
		edit func(s *State)
		want string // "" allowed, else "clause object (field)"
	}{
		{"detach", call("detach_disk", "vm-1", "d-1"), ok(nil), func(s *State) {
			delete(s.VMs["vm-1"].Disks, "d-1")
			s.Disks["d-1"] = Disk{CID: "d-1", SizeMiB: 1024}
			s.Registry["vm-1"] = Settings{Raw: json.RawMessage(`{"disks":{"persistent":{"d-2":{}}}}`)}
		}, ""},
		{"detach the other disk too", call("detach_disk", "vm-1", "d-1"), ok(nil), func(s *State) {
			s.VMs["vm-1"] = VM{CID: "vm-1", AgentID: "a1", Stemcell: "sc-1", Metadata: map[string]string{"name": "x"}, Disks: map[string]Attachment{}, Boots: 1}
			s.Disks["d-1"] = Disk{CID: "d-1", SizeMiB: 1024}
			s.Disks["d-2"] = Disk{CID: "d-2", SizeMiB: 1024}
			s.Registry["vm-1"] = Settings{Raw: json.RawMessage(`{"disks":{"persistent":{}}}`)}
		}, "model.frame vm vm-1 (disks.d-2)"},
		{"detach leaves the registry behind", call("detach_disk", "vm-1", "d-1"), ok(nil), func(s *State) {
			delete(s.VMs["vm-1"].Disks, "d-1")
			s.Disks["d-1"] = Disk{CID: "d-1", SizeMiB: 1024}
		}, "model.registry registry vm-1 (disks.persistent)"},
		{"detach reported but not done", call("detach_disk", "vm-1", "d-1"), ok(nil), func(s *State) {}, "model.effect disk d-1 (attached_to)"},
		{"reboot keeps metadata", call("reboot_vm", "vm-1"), ok(nil), func(s *State) {
			v := s.VMs["vm-1"]
			v.Boots, v.Metadata = 2, nil
			s.VMs["vm-1"] = v
		}, "model.frame vm vm-1 (metadata.name)"},
		{"reboot", call("reboot_vm", "vm-1"), ok(nil), func(s *State) {
			v := s.VMs["vm-1"]
			v.Boots = 2
			s.VMs["vm-1"] = v
		}, ""},
		{"disk rounded up", call("create_disk", 1025, map[string]string{"type": "ssd"}, nil), ok("d-9"), func(s *State) {
			s.Disks["d-9"] = Disk{CID: "d-9", SizeMiB: 2048, CloudProperties: json.RawMessage(`{"type":"ssd","iops":300}`)}
		}, ""},
		{"disk too big", call("create_disk", 1025, map[string]string{}, nil), ok("d-9"), func(s *State) {
			s.Disks["d-9"] = Disk{CID: "d-9", SizeMiB: 3072}
		}, "model.effect disk d-9 (size_mib)"},
		{"disk lost its cloud_properties", call("create_disk", 1024, map[string]string{"type": "ssd"}, nil), ok("d-9"), func(s *State) {
			s.Disks["d-9"] = Disk{CID: "d-9", SizeMiB: 1024, CloudProperties: json.RawMessage(`{"type":"standard"}`)}
		}, "model.effect disk d-9 (cloud_properties.type)"},
		{"create_disk returns another CID", call("create_disk", 1024, map[string]string{}, nil), ok("d-3"), func(s *State) {
			s.Disks["d-9"] = Disk{CID: "d-9", SizeMiB: 1024}
		}, "model.answers disk d-3"},
		{"metadata sanitised", call("set_vm_metadata", "vm-2", map[string]string{"Name": "Job/0", "empty": ""}), ok(nil), func(s *State) {
			v := s.VMs["vm-2"]
			v.Metadata = map[string]string{"name": "job-0"}
			s.VMs["vm-2"] = v
		}, ""},
		{"metadata on the wrong VM", call("set_vm_metadata", "vm-2", map[string]string{"name": "y"}), ok(nil), func(s *State) {
			v := s.VMs["vm-1"]
			v.Metadata = map[string]string{"name": "y"}
			s.VMs["vm-1"] = v
		}, "model.effect vm vm-2 (metadata.name)"},
		{"failed create leaks", call("create_vm", "a3", "sc-1", map[string]any{}, map[string]any{}, []string{}, map[string]any{}), Result{Value: json.RawMessage("null"), ErrType: TypeVMCreation}, func(s *State) {
			s.VMs["vm-9"] = VM{CID: "vm-9", AgentID: "a3", Stemcell: "sc-1"}
		}, "model.failed-call vm vm-9"},
		{"delete_disk takes its snapshots", call("delete_disk", "d-3"), ok(nil), func(s *State) {
			delete(s.Disks, "d-3")
			delete(s.Snapshots, "sn-1")
		}, "model.frame snapshot sn-1"},
		{"update_disk new CID", call("update_disk", "d-3", 4096, map[string]string{"type": "fast"}), ok("d-9"), func(s *State) {
			delete(s.Disks, "d-3")
			s.Disks["d-9"] = Disk{CID: "d-9", SizeMiB: 4096, CloudProperties: json.RawMessage(`{"type":"fast"}`)}
		}, ""},
		{"update_disk new CID keeps the old disk", call("update_disk", "d-3", 4096, map[string]string{"type": "fast"}), ok("d-9"), func(s *State) {
			s.Disks["d-9"] = Disk{CID: "d-9", SizeMiB: 4096, CloudProperties: json.RawMessage(`{"type":"fast"}`)}
		}, "model.effect disk d-3"},
		{"a view without details: metadata not judged", call("set_vm_metadata", "vm-2", map[string]string{"name": "y"}), ok(nil), func(s *State) {
			s.Unseen = map[string]string{SeenDetails: "not shown"}
		}, ""},
		{"a view without details: attachments still judged", call("detach_disk", "vm-1", "d-1"), ok(nil), func(s *State) {
			s.Unseen = map[string]string{SeenDetails: "not shown"}
		}, "model.effect disk d-1 (attached_to)"},
		{"reboot that boots nothing", call("reboot_vm", "vm-2"), ok(nil), func(s *State) {}, "model.effect vm vm-2 (boots)"},
		{"get_disks misses one", call("get_disks", "vm-1"), ok([]string{"d-1"}), func(s *State) {}, "model.answers vm vm-1 (disks)"},
		{"has_vm", call("has_vm", "vm-2"), ok(true), func(s *State) {}, ""},
		{"resize NotSupported", call("resize_disk", "d-3", 1024), Result{Value: json.RawMessage("null"), ErrType: TypeNotSupported}, func(s *State) {}, ""},
		{"delete_vm keeps disks", call("delete_vm", "vm-1"), ok(nil), func(s *State) {
			delete(s.VMs, "vm-1")
			delete(s.Registry, "vm-1")
			s.Disks["d-1"] = Disk{CID: "d-1", SizeMiB: 1024}
			s.Disks["d-2"] = Disk{CID: "d-2", SizeMiB: 1024}
		}, ""},
		{"delete_vm leaves its settings", call("delete_vm", "vm-1"), ok(nil), func(s *State) {
			delete(s.VMs, "vm-1")
			s.Disks["d-1"] = Disk{CID: "d-1", SizeMiB: 1024}
			s.Disks["d-2"] = Disk{CID: "d-2", SizeMiB: 1024}
		}, "model.registry registry vm-1"},
		{"attach elsewhere writes another VM's settings", call("attach_disk", "vm-2", "d-3"), ok(map[string]string{"path": "/dev/sdc"}), func(s *State) {
			s.VMs["vm-2"].Disks["d-3"] = Attachment{Device: "sdc", LUN: 2}
			s.Disks["d-3"] = Disk{CID: "d-3", SizeMiB: 2048, AttachedTo: "vm-2"}
			s.Registry["vm-1"] = Settings{Raw: json.RawMessage(`{"disks":{"persistent":{"d-1":{},"d-2":{},"d-3":{}}}}`)}
		}, "model.registry registry vm-1 (disks.persistent.d-3)"},
		{"unknown method changes nothing", call("frobnicate"), Result{Value: json.RawMessage("null"), ErrType: TypeNotImplemented}, func(s *State) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := base()
			after := before.Clone()
			tc.edit(&after)
			vs, why := Check(before, tc.c, tc.r, after)
			if why != "" {
				t.Fatalf("not checked: %s", why)
			}
			if tc.want == "" {
				if len(vs) > 0 {
					t.Fatalf("want no violation, got %v", vs)
				}
				return
			}
			if len(vs) == 0 {
				t.Fatalf("want %s, got no violation", tc.want)
			}
			got := vs[0].Clause + " " + vs[0].Object
			if vs[0].Field != "" {
				got += " (" + vs[0].Field + ")"
			}
			if got != tc.want || !strings.Contains(vs[0].String(), tc.c.Method) {
				t.Fatalf("want %s, got %v", tc.want, vs)
			}
		})
	}
}

// TestLegal: outcomes name the clause, tolerated errors and latitude.
func TestLegal(t *testing.T) {
	o := Legal(base(), call("resize_disk", "d-3", 4096))
	if !o.Known || !o.Succeed || o.Clause != ClauseEffect {
		t.Fatalf("resize_disk: %+v", o)
	}
	if !strings.Contains(strings.Join(o.Tolerated, " "), TypeNotSupported) || len(o.Latitude) == 0 {
		t.Fatalf("resize_disk tolerates NotSupported with latitude: %+v", o)
	}
	if o := Legal(base(), call("attach_disk", "vm-9", "d-3")); o.Succeed {
		t.Fatalf("attach_disk to a missing VM cannot succeed: %+v", o)
	}
	if o := Legal(base(), call("attach_disk", "vm-2", "d-1")); !strings.Contains(strings.Join(o.Touches, ","), "vm vm-1") {
		t.Fatalf("attaching a disk held by vm-1 may touch vm-1: %+v", o.Touches)
	}
	if o := Legal(base(), Call{Method: "create_disk", Args: []json.RawMessage{json.RawMessage(`"big"`)}}); o.Known || o.NotChecked == "" {
		t.Fatalf("a malformed call is not checked, saying why: %+v", o)
	}
}

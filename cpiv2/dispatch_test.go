package cpiv2_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
)

// dispatch sends one raw request to a Dispatcher over impl and decodes the
// response strictly.
func dispatch(t *testing.T, impl cpiv2.Core, cfg cpiv2.DispatcherConfig, req string) cpiv2.Response {
	t.Helper()
	var out bytes.Buffer
	if err := cpiv2.NewDispatcher(impl, cfg).Serve(context.Background(), strings.NewReader(req), &out); err != nil {
		t.Fatal(err)
	}
	resp, err := cpiv2.DecodeResponse(out.Bytes())
	if err != nil {
		t.Fatalf("dispatcher wrote an invalid response to %s: %v", req, err)
	}
	return resp
}

func TestDispatcherErrorTypes(t *testing.T) {
	for _, tc := range []struct {
		name, req string
		cfg       cpiv2.DispatcherConfig
		impl      cpiv2.Core
		want      cpiv2.ErrorType
		mention   string // the argument or thing the message must name
	}{
		{"bad json", `{"method":`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeCpiError, ""},
		{"no method", `{"arguments":[]}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeCpiError, "method"},
		{"arguments not array", `{"method":"has_vm","arguments":"vm-1"}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeCpiError, "arguments"},
		{"unknown method", `{"method":"create_network","arguments":[]}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeNotImplemented, "create_network"},
		{"api_version above max", `{"method":"info","arguments":[],"api_version":3}`, cpiv2.DispatcherConfig{MaxAPIVersion: 2}, nil, cpiv2.TypeNotImplemented, "3"},
		{"too few arguments", `{"method":"attach_disk","arguments":["vm-1"]}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeCloudError, "disk_cid"},
		{"argument wrong type", `{"method":"create_disk","arguments":["big",{},null]}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeCloudError, "size"},
		{"empty cid", `{"method":"delete_vm","arguments":[""]}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeCloudError, "vm_cid"},
		{"null cid", `{"method":"delete_disk","arguments":[null]}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeCloudError, "disk_cid"},
		{"metadata not strings", `{"method":"set_vm_metadata","arguments":["vm-1",{"a":1}]}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeCloudError, "metadata"},
		{"update_disk at 1", `{"method":"update_disk","arguments":["disk-1",10,{}],"api_version":1}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeNotImplemented, "update_disk"},
		{"no has_vm", `{"method":"has_vm","arguments":["vm-1"]}`, cpiv2.DispatcherConfig{}, coreOnly{newMemCPI()}, cpiv2.TypeNotImplemented, "has_vm"},
		{"no snapshots", `{"method":"snapshot_disk","arguments":["disk-1",{}]}`, cpiv2.DispatcherConfig{}, coreOnly{newMemCPI()}, cpiv2.TypeNotImplemented, "snapshot_disk"},
		{"no resize", `{"method":"resize_disk","arguments":["disk-1",10]}`, cpiv2.DispatcherConfig{}, coreOnly{newMemCPI()}, cpiv2.TypeNotSupported, "resize_disk"},
		{"no update", `{"method":"update_disk","arguments":["disk-1",10,{}],"api_version":2}`, cpiv2.DispatcherConfig{}, coreOnly{newMemCPI()}, cpiv2.TypeNotSupported, "update_disk"},
		{"cpi error keeps type", `{"method":"delete_disk","arguments":["disk-9"]}`, cpiv2.DispatcherConfig{}, nil, cpiv2.TypeDiskNotFound, "disk-9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			impl := tc.impl
			if impl == nil {
				impl = newMemCPI()
			}
			resp := dispatch(t, impl, tc.cfg, tc.req)
			if resp.Error == nil {
				t.Fatalf("no error; result %s", resp.Result)
			}
			if resp.Error.Type != tc.want {
				t.Errorf("type = %s, want %s (%s)", resp.Error.Type, tc.want, resp.Error.Message)
			}
			if tc.mention != "" && !strings.Contains(resp.Error.Message, tc.mention) {
				t.Errorf("message %q does not name %s", resp.Error.Message, tc.mention)
			}
		})
	}
}

func TestDispatcherGoErrorBecomesCloudError(t *testing.T) {
	m := newMemCPI()
	m.fail = errors.New("quota exceeded")
	resp := dispatch(t, m, cpiv2.DispatcherConfig{}, `{"method":"create_disk","arguments":[10,{},null]}`)
	if resp.Error == nil || resp.Error.Type != cpiv2.TypeCloudError || resp.Error.Message != "quota exceeded" || resp.Result != nil {
		t.Errorf("response = %+v", resp)
	}
	m.fail = cpiv2.NewError(cpiv2.TypeNoDiskSpace, "full").Retryable()
	resp = dispatch(t, m, cpiv2.DispatcherConfig{}, `{"method":"create_disk","arguments":[10,{},null]}`)
	if resp.Error == nil || resp.Error.Type != cpiv2.TypeNoDiskSpace || !resp.Error.OkToRetry {
		t.Errorf("response = %+v", resp)
	}
}

func TestDispatcherInfoAPIVersion(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want string
	}{
		{0, `{"stemcell_formats":["mem-raw"],"api_version":3}`},
		{2, `{"stemcell_formats":["mem-raw"],"api_version":2}`},
		{1, `{"stemcell_formats":["mem-raw"]}`},
	} {
		resp := dispatch(t, newMemCPI(), cpiv2.DispatcherConfig{MaxAPIVersion: tc.max}, `{"method":"info","arguments":[],"context":{"director_uuid":"d","request_id":"cpi-000001"}}`)
		if string(resp.Result) != tc.want {
			t.Errorf("max %d: info = %s, want %s", tc.max, resp.Result, tc.want)
		}
	}
}

func TestDispatcherResultShapes(t *testing.T) {
	m := newMemCPI()
	cfg := cpiv2.DispatcherConfig{}
	const createVM = `{"method":"create_vm","arguments":["agent",{"x":1},{},{"n":{"type":"dynamic"}},[],{}]%s}`
	if r := dispatch(t, m, cfg, strings.Replace(createVM, "%s", "", 1)); r.Error == nil || r.Error.Type != cpiv2.TypeCloudError {
		t.Errorf("create_vm with a hash as stemcell_cid: %+v", r)
	}
	v1 := dispatch(t, m, cfg, `{"method":"create_vm","arguments":["agent","sc-1",{},{"n":{"type":"dynamic"}},[],{}]}`)
	v2 := dispatch(t, m, cfg, `{"method":"create_vm","arguments":["agent","sc-1",{},{"n":{"type":"dynamic"}},[],{}],"api_version":2}`)
	if string(v1.Result) != `"vm-1"` || string(v2.Result) != `["vm-2",{"n":{"type":"dynamic"}}]` {
		t.Errorf("create_vm v1 = %s, v2 = %s", v1.Result, v2.Result)
	}
	dispatch(t, m, cfg, `{"method":"create_disk","arguments":[5,{},null]}`)
	a1 := dispatch(t, m, cfg, `{"method":"attach_disk","arguments":["vm-1","disk5-3"],"api_version":1}`)
	a2 := dispatch(t, m, cfg, `{"method":"attach_disk","arguments":["vm-1","disk5-3"],"api_version":2}`)
	if string(a1.Result) != `null` || string(a2.Result) != `{"path":"/dev/sdc","id":"disk5-3"}` {
		t.Errorf("attach_disk v1 = %s, v2 = %s", a1.Result, a2.Result)
	}
	g := dispatch(t, m, cfg, `{"method":"get_disks","arguments":["vm-none"]}`)
	if string(g.Result) != `[]` {
		t.Errorf("get_disks of a VM without disks = %s, want []", g.Result)
	}
}

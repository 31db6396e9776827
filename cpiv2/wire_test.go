package cpiv2_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
)

func TestDecodeResponseInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		kind      error
		key       string
	}{
		{"empty", "", cpiv2.ErrEmptyOutput, ""},
		{"blank", " \n\t", cpiv2.ErrEmptyOutput, ""},
		{"not json", "Traceback (most recent call last):", cpiv2.ErrNotJSON, ""},
		{"not an object", `["result"]`, cpiv2.ErrNotObject, ""},
		{"a string", `"ok"`, cpiv2.ErrNotObject, ""},
		{"two objects", `{"result":null,"error":null,"log":""} {"result":null,"error":null,"log":""}`, cpiv2.ErrMultipleObjects, ""},
		{"trailing garbage", `{"result":null,"error":null,"log":""} done`, cpiv2.ErrTrailingGarbage, ""},
		{"truncated", `{"result":{"a":[1,2`, cpiv2.ErrTruncatedOutput, ""},
		{"truncated string", `{"result":"vm-`, cpiv2.ErrTruncatedOutput, ""},
		{"missing result", `{"error":null,"log":""}`, cpiv2.ErrMissingKey, "result"},
		{"missing error", `{"result":null,"log":""}`, cpiv2.ErrMissingKey, "error"},
		{"missing log", `{"result":null,"error":null}`, cpiv2.ErrMissingKey, "log"},
		{"log null", `{"result":null,"error":null,"log":null}`, cpiv2.ErrLogNotString, "log"},
		{"log array", `{"result":null,"error":null,"log":["a"]}`, cpiv2.ErrLogNotString, "log"},
		{"error a string", `{"result":null,"error":"boom","log":""}`, cpiv2.ErrBadErrorObject, "error"},
		{"error type missing", `{"result":null,"error":{"message":"m","ok_to_retry":false},"log":""}`, cpiv2.ErrBadErrorObject, "error.type"},
		{"error message number", `{"result":null,"error":{"type":"Bosh::Clouds::CloudError","message":3,"ok_to_retry":false},"log":""}`, cpiv2.ErrBadErrorObject, "error.message"},
		{"ok_to_retry string", `{"result":null,"error":{"type":"Bosh::Clouds::CloudError","message":"m","ok_to_retry":"true"},"log":""}`, cpiv2.ErrOkToRetryNotBool, "error.ok_to_retry"},
		{"ok_to_retry missing", `{"result":null,"error":{"type":"Bosh::Clouds::CloudError","message":"m"},"log":""}`, cpiv2.ErrOkToRetryNotBool, "error.ok_to_retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cpiv2.DecodeResponse([]byte(tc.out))
			var ir *cpiv2.InvalidResponseError
			if !errors.As(err, &ir) {
				t.Fatalf("err = %v (%T), want *InvalidResponseError", err, err)
			}
			if !errors.Is(err, tc.kind) || !errors.Is(err, cpiv2.ErrInvalidResponse) {
				t.Errorf("err = %v, want kind %v", err, tc.kind)
			}
			if ir.Key != tc.key {
				t.Errorf("Key = %q, want %q", ir.Key, tc.key)
			}
			for _, other := range []error{cpiv2.ErrNotJSON, cpiv2.ErrMultipleObjects, cpiv2.ErrTruncatedOutput, cpiv2.ErrMissingKey} {
				if other != tc.kind && errors.Is(err, other) {
					t.Errorf("err also matches %v", other)
				}
			}
		})
	}
}

func TestDecodeResponseValid(t *testing.T) {
	r, err := cpiv2.DecodeResponse([]byte(` {"result":["vm-1",{}],"error":null,"log":"hi","extra":1}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Result) != `["vm-1",{}]` || r.Error != nil || r.Log != "hi" {
		t.Errorf("got %+v", r)
	}
	r, err = cpiv2.DecodeResponse([]byte(`{"result":null,"error":{"type":"Bosh::Clouds::VMCreationFailed","message":"quota","ok_to_retry":true},"log":""}`))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Error, cpiv2.ErrVMCreationFailed) || !errors.Is(r.Error, cpiv2.ErrCloudError) || !r.Error.OkToRetry {
		t.Errorf("error = %+v", r.Error)
	}
}

func TestInvalidResponseErrorMessage(t *testing.T) {
	_, err := cpiv2.DecodeResponse([]byte(`oops`))
	var ir *cpiv2.InvalidResponseError
	if !errors.As(err, &ir) {
		t.Fatal(err)
	}
	ir.Method, ir.RequestID = "create_vm", "cpi-000042"
	// The message is for people; this checks that it names the call and
	// quotes the output, not its wording.
	msg := ir.Error()
	for _, part := range []string{"create_vm", "cpi-000042", `"oops"`} {
		if !strings.Contains(msg, part) {
			t.Errorf("message %q does not name %s", msg, part)
		}
	}
}

func TestRequestEncodeDeterministic(t *testing.T) {
	req := cpiv2.Request{
		Method:    "create_disk",
		Arguments: []json.RawMessage{json.RawMessage(`1024`), json.RawMessage(`{ "b": 1, "a": 2 }`), json.RawMessage(`null`)},
		Context: cpiv2.RequestContext{DirectorUUID: "d", RequestID: "cpi-000001", StemcellAPIVersion: 2,
			Properties: map[string]json.RawMessage{"zeta": json.RawMessage(`1`), "alpha": json.RawMessage(`{"x": [1, 2]}`), "request_id": json.RawMessage(`"spoof"`)}},
		APIVersion: 2,
	}
	want := `{"method":"create_disk","arguments":[1024,{"b":1,"a":2},null],"context":{"director_uuid":"d","request_id":"cpi-000001","vm":{"stemcell":{"api_version":2}},"alpha":{"x":[1,2]},"zeta":1},"api_version":2}`
	for range 20 {
		got, err := req.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("Encode =\n%s\nwant\n%s", got, want)
		}
	}
	back, err := cpiv2.DecodeRequest([]byte(want))
	if err != nil {
		t.Fatal(err)
	}
	if back.Method != "create_disk" || back.APIVersion != 2 || back.Context.StemcellAPIVersion != 2 ||
		back.Context.RequestID != "cpi-000001" || len(back.Context.Properties) != 2 || len(back.Arguments) != 3 {
		t.Errorf("DecodeRequest = %+v", back)
	}
	req.Arguments = append(req.Arguments, json.RawMessage(`{bad`))
	if _, err := req.Encode(); err == nil {
		t.Error("Encode accepted an invalid argument")
	}
}

func TestDecodeRequestMalformed(t *testing.T) {
	for _, in := range []string{
		`not json`,
		`{"arguments":[]}`,
		`{"method":3,"arguments":[]}`,
		`{"method":"info"}`,
		`{"method":"info","arguments":{}}`,
		`{"method":"info","arguments":[],"api_version":"2"}`,
		`{"method":"info","arguments":[],"context":[]}`,
		`{"method":"info","arguments":[]} {}`,
	} {
		_, err := cpiv2.DecodeRequest([]byte(in))
		var e *cpiv2.Error
		if !errors.As(err, &e) || e.Type != cpiv2.TypeCpiError {
			t.Errorf("%s: err = %v, want a CpiError", in, err)
		}
	}
}

// A result beside an error is dropped, as the Director and the bosh CLI
// drop it: the error is what the call answered.
func TestDecodeResponseDropsAResultBesideAnError(t *testing.T) {
	r, err := cpiv2.DecodeResponse([]byte(`{"result":"vm-1","error":{"type":"Bosh::Clouds::VMNotFound","message":"m","ok_to_retry":false},"log":""}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Error == nil || r.Error.Type != cpiv2.TypeVMNotFound || r.Result != nil {
		t.Fatalf("got result %s, error %+v: want no result and the VMNotFound", r.Result, r.Error)
	}
}

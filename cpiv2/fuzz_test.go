package cpiv2_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
)

func FuzzDecodeResponse(f *testing.F) {
	for _, s := range []string{
		`{"result":null,"error":null,"log":""}`,
		`{"result":["vm-1",{}],"error":null,"log":"x"}`,
		`{"result":null,"error":{"type":"Bosh::Clouds::CloudError","message":"m","ok_to_retry":true},"log":""}`,
		`{"result":1,"error":{"type":"t","message":"m","ok_to_retry":false},"log":""}`,
		`{"result":null,"error":null,"log":""}{}`,
		`{"result":null,"error":null,"log":""} x`,
		`{"result":`, `[]`, `"x"`, ``, `{"log":1}`, `{"result":null,"error":{"ok_to_retry":"yes"},"log":""}`,
		`{"error":{"type":"t","message":"m","ok_to_retry":false},"error":null,"result":"disk-1","log":""}`,
		`{"result":{"a":{"b":1,"b":2}},"error":null,"log":""}`,
		"{\"result\":\"\xff\",\"error\":null,\"log\":\"\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := cpiv2.DecodeResponse(data)
		lenient, lerr := cpiv2.DecodeResponseWith(data, cpiv2.DecodeOptions{LenientJSON: true})
		if err == nil && (lerr != nil || !sameResponse(resp, lenient)) {
			t.Fatalf("DecodeResponse(%q) accepts what the lenient reading reads differently: %v", data, lerr)
		}
		if lerr == nil && err != nil && !errors.Is(err, cpiv2.ErrDuplicateKey) && !errors.Is(err, cpiv2.ErrInvalidUTF8) {
			t.Fatalf("DecodeResponse(%q) = %v: strictness refused something other than a duplicate key or invalid UTF-8", data, err)
		}
		if err == nil {
			if cerr := cpiv2.CheckJSON(bytes.TrimSpace(data)); cerr != nil {
				t.Fatalf("DecodeResponse(%q) accepted what CheckJSON refuses: %v", data, cerr)
			}
		}
		if err != nil {
			var ir *cpiv2.InvalidResponseError
			if !errors.As(err, &ir) || ir.Kind == nil || !errors.Is(err, cpiv2.ErrInvalidResponse) {
				t.Fatalf("DecodeResponse(%q) error %v is not a kinded *InvalidResponseError", data, err)
			}
			return
		}
		if resp.Error != nil && !isJSONNull(resp.Result) {
			t.Fatalf("DecodeResponse(%q) returned a result beside an error", data)
		}
		enc, err := resp.Encode()
		if err != nil {
			t.Fatalf("re-encoding %q: %v", data, err)
		}
		again, err := cpiv2.DecodeResponse(enc)
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", enc, err)
		}
		if !sameResponse(resp, again) {
			t.Fatalf("round trip changed %q: %+v → %+v", data, resp, again)
		}
	})
}

func isJSONNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func sameResponse(a, b cpiv2.Response) bool {
	var ca, cb bytes.Buffer
	if !isJSONNull(a.Result) {
		if json.Compact(&ca, a.Result) != nil {
			return false
		}
	}
	if !isJSONNull(b.Result) {
		if json.Compact(&cb, b.Result) != nil {
			return false
		}
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes()) && a.Log == b.Log && reflect.DeepEqual(a.Error, b.Error)
}

func FuzzDiskHint(f *testing.F) {
	for _, s := range []string{
		`"/dev/sdc"`, `"3"`, `""`, `{"path":"/dev/sdc"}`, `{"volume_id":"2"}`, `{"id":"disk-abc"}`,
		`{"lun":"0","host_device_id":"abc"}`, `{"iscsi_settings":{"username":"u","target":"t"}}`,
		`{"lun":0}`, `{"iscsi_settings":"x"}`, `null`, `[]`, `{"path":"\u00e9"}`, `{"other":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h cpiv2.DiskHint
		if err := json.Unmarshal(data, &h); err != nil {
			return
		}
		enc, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("re-encoding the hint of %q: %v", data, err)
		}
		var back cpiv2.DiskHint
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("re-encoded hint %s of %q does not decode: %v", enc, data, err)
		}
		if !reflect.DeepEqual(h, back) {
			t.Fatalf("round trip of %q changed the hint: %+v → %+v (via %s)", data, h, back, enc)
		}
	})
}

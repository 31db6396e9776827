package cpiv2_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
)

func TestCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		kind     error
		key      string
	}{
		{"plain object", `{"a":1,"b":[{"a":2},{"a":3}],"c":{"a":{"a":null}}}`, nil, ""},
		{"same key in sibling objects", `[{"k":1},{"k":2}]`, nil, ""},
		{"scalar", `"x"`, nil, ""},
		{"unicode", `{"é":"ü","日本":"\u00e9"}`, nil, ""},
		{"top-level duplicate", `{"error":{"type":"t"},"error":null,"result":"disk-1"}`, cpiv2.ErrDuplicateKey, "error"},
		{"nested duplicate", `{"result":{"cloud":{"x":1,"x":1}}}`, cpiv2.ErrDuplicateKey, "result.cloud.x"},
		{"duplicate in an array element", `{"result":[1,{"id":"a","id":"b"}]}`, cpiv2.ErrDuplicateKey, "result[1].id"},
		{"duplicate after unescaping", `{"log":"","\u006cog":""}`, cpiv2.ErrDuplicateKey, "log"},
		{"duplicate empty key", `{"":1,"":2}`, cpiv2.ErrDuplicateKey, `""`},
		{"invalid UTF-8 in a string", "{\"log\":\"\xff\"}", cpiv2.ErrInvalidUTF8, ""},
		{"truncated UTF-8 sequence", "{\"log\":\"\xe2\x82\"}", cpiv2.ErrInvalidUTF8, ""},
		{"invalid UTF-8 in a key", "{\"\xc0\xaf\":1}", cpiv2.ErrInvalidUTF8, ""},
		{"surrogate pair", `{"log":"\ud83d\ude00 and \\ud800 is text"}`, nil, ""},
		{"lone high surrogate", `{"log":"\ud800x"}`, cpiv2.ErrInvalidUTF8, ""},
		{"lone low surrogate", `{"log":"\udc00"}`, cpiv2.ErrInvalidUTF8, ""},
		{"high then not low", `{"log":"\ud800\u0041"}`, cpiv2.ErrInvalidUTF8, ""},
		{"surrogate in a key", `{"\udfff":1}`, cpiv2.ErrInvalidUTF8, ""},
		{"truncated", `{"a":[1,`, cpiv2.ErrTruncatedOutput, ""},
		{"not JSON", `{a:1}`, cpiv2.ErrNotJSON, ""},
		{"two values", `{} {}`, cpiv2.ErrTrailingGarbage, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cpiv2.CheckJSON([]byte(tc.in))
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("CheckJSON(%q) = %v, want nil", tc.in, err)
				}
				return
			}
			var ir *cpiv2.InvalidResponseError
			if !errors.As(err, &ir) || !errors.Is(err, tc.kind) || !errors.Is(err, cpiv2.ErrInvalidResponse) {
				t.Fatalf("CheckJSON(%q) = %v, want an *InvalidResponseError of kind %v", tc.in, err, tc.kind)
			}
			if ir.Key != tc.key {
				t.Errorf("Key = %q, want %q", ir.Key, tc.key)
			}
			if ir.Excerpt == "" {
				t.Errorf("no excerpt in %v", err)
			}
		})
	}
}

func TestDecodeResponseStrictJSON(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		kind      error
	}{
		// The instance: a lenient reader sees a success with
		// result "disk-1".
		{"error then null error", `{"error":{"type":"Bosh::Clouds::CloudError","message":"m","ok_to_retry":false},"error":null,"result":"disk-1","log":""}`, cpiv2.ErrDuplicateKey},
		{"two results", `{"result":"disk-1","result":"disk-2","error":null,"log":""}`, cpiv2.ErrDuplicateKey},
		{"duplicate inside error", `{"result":null,"error":{"type":"Bosh::Clouds::CloudError","type":"Bosh::Clouds::VMNotFound","message":"m","ok_to_retry":false},"log":""}`, cpiv2.ErrDuplicateKey},
		{"duplicate inside result", `{"result":{"path":"/dev/sdc","path":"/dev/sdd"},"error":null,"log":""}`, cpiv2.ErrDuplicateKey},
		{"invalid UTF-8 in result", "{\"result\":\"disk-\xff\",\"error\":null,\"log\":\"\"}", cpiv2.ErrInvalidUTF8},
		{"invalid UTF-8 in log", "{\"result\":null,\"error\":null,\"log\":\"\xfe\"}", cpiv2.ErrInvalidUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cpiv2.DecodeResponse([]byte(tc.out))
			if !errors.Is(err, tc.kind) || !errors.Is(err, cpiv2.ErrInvalidResponse) {
				t.Fatalf("DecodeResponse = %v, want kind %v", err, tc.kind)
			}
			// The upstream callers' lenient reading accepts it.
			if _, err := cpiv2.DecodeResponseWith([]byte(tc.out), cpiv2.DecodeOptions{LenientJSON: true}); err != nil {
				t.Errorf("lenient DecodeResponseWith = %v, want success", err)
			}
		})
	}
	// Lenient: the last key wins, as in Ruby's JSON.parse and Go's
	// encoding/json.
	r, err := cpiv2.DecodeResponseWith([]byte(`{"error":{"type":"Bosh::Clouds::CloudError","message":"m","ok_to_retry":false},"error":null,"result":"disk-1","log":""}`), cpiv2.DecodeOptions{LenientJSON: true})
	if err != nil || r.Error != nil || string(r.Result) != `"disk-1"` {
		t.Errorf("lenient decode = %+v, %v; want result disk-1 and no error", r, err)
	}
}

func TestRunnerRejectsDuplicateKeys(t *testing.T) {
	out := `{"error":{"type":"Bosh::Clouds::CloudError","message":"quota","ok_to_retry":false},"error":null,"result":"disk-1","log":""}`
	strict := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorV1}, "raw", out)
	_, err := strict.CreateDisk(context.Background(), cpiv2.CreateDiskArgs{SizeMiB: 1})
	var ir *cpiv2.InvalidResponseError
	if !errors.Is(err, cpiv2.ErrDuplicateKey) || !errors.As(err, &ir) || ir.Method != "create_disk" || ir.Key != "error" {
		t.Fatalf("err = %v, want ErrDuplicateKey on key error of create_disk", err)
	}
	lenient := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorV1, LenientJSON: true}, "raw", out)
	cid, err := lenient.CreateDisk(context.Background(), cpiv2.CreateDiskArgs{SizeMiB: 1})
	if err != nil || cid.String() != "disk-1" {
		t.Errorf("LenientJSON: create_disk = %q, %v; want disk-1 as upstream reads it", cid, err)
	}
}

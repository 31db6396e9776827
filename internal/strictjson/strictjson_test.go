package strictjson_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/internal/strictjson"
)

type inner struct {
	Type string `json:"type"`
}

type Base struct {
	ID int `json:"id"`
}

type target struct {
	Base
	DiskName string            `json:"disk_name"`
	Size     int               `json:"disk_size"`
	Meta     map[string]string `json:"metadata"`
	Errs     []inner           `json:"errors"`
	Inner    *inner            `json:"inner"`
	Any      any               `json:"any"`
}

func TestDecodeRefusesAmbiguousInput(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind error
		key  string
	}{
		{`{"disk_name":"xa","disk_name":"xb"}`, strictjson.ErrDuplicateKey, "disk_name"},
		{`{"disk_name":"xa","Disk_Name":"xb"}`, strictjson.ErrDuplicateKey, "Disk_Name"},
		{`{"DISK_SIZE":1,"disk_size":2}`, strictjson.ErrDuplicateKey, "disk_size"},
		{`{"id":1,"ID":2}`, strictjson.ErrDuplicateKey, "ID"},
		{`{"inner":{"type":"a","Type":"b"}}`, strictjson.ErrDuplicateKey, "inner.Type"},
		{`{"errors":[{"type":"a"},{"type":"a","type":"b"}]}`, strictjson.ErrDuplicateKey, "errors[1].type"},
		{`{"metadata":{"k":"a","k":"b"}}`, strictjson.ErrDuplicateKey, "metadata.k"},
		{`{"any":{"x":1,"x":2}}`, strictjson.ErrDuplicateKey, "any.x"},
		{`{"disk_\u006eame":"a","disk_name":"b"}`, strictjson.ErrDuplicateKey, "disk_name"},
		{"{\"disk_name\":\"a\xff\"}", strictjson.ErrInvalidUTF8, ""},
		{`{"disk_name":"\ud800"}`, strictjson.ErrInvalidUTF8, ""},
		{`{"disk_name":"a"} {}`, strictjson.ErrTrailingData, ""},
		{`{"disk_name":"a"`, strictjson.ErrTruncated, ""},
		{`   `, strictjson.ErrEmpty, ""},
		{`{"disk_size":"ten"}`, strictjson.ErrType, "disk_size"},
		{`nope`, strictjson.ErrNotJSON, ""},
	} {
		var v target
		err := strictjson.Unmarshal([]byte(tc.in), &v)
		var je *strictjson.Error
		if !errors.As(err, &je) || !errors.Is(err, tc.kind) || je.Key != tc.key {
			t.Errorf("%s: err = %v (key %q); want %v at %q", tc.in, err, keyOf(je), tc.kind, tc.key)
			continue
		}
		if tc.key != "" && !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: error %q does not name %q", tc.in, err, tc.key)
		}
	}
}

func keyOf(e *strictjson.Error) string {
	if e == nil {
		return ""
	}
	return e.Key
}

// Map keys are data: two that differ in case are two entries, unless
// FoldKeys asks otherwise.
func TestMapKeysDifferingInCase(t *testing.T) {
	in := []byte(`{"metadata":{"Name":"a","name":"b"}}`)
	var v target
	if err := strictjson.Unmarshal(in, &v); err != nil || v.Meta["Name"] != "a" || v.Meta["name"] != "b" {
		t.Fatalf("%v %v", v.Meta, err)
	}
	var m map[string]any
	err := strictjson.Decode([]byte(`{"disk_name":"a","DISK_NAME":"b"}`), &m, strictjson.Options{FoldKeys: true})
	if !errors.Is(err, strictjson.ErrDuplicateKey) || !strings.Contains(err.Error(), `"disk_name" and "DISK_NAME"`) {
		t.Fatalf("FoldKeys: %v", err)
	}
	if err := strictjson.Unmarshal([]byte(`{"disk_name":"a","DISK_NAME":"b"}`), &m); err != nil {
		t.Fatalf("exact keys into a map: %v", err)
	}
	if err := strictjson.Decode([]byte(`{"metadata":{"Name":"a","name":"b"}}`), &m, strictjson.Options{FoldKeys: true}); err != nil {
		t.Fatalf("FoldKeys folded a nested map's keys: %v", err)
	}
}

func TestDecodeOptions(t *testing.T) {
	var v target
	err := strictjson.Decode([]byte(`{"disk_name":"a","nope":1}`), &v, strictjson.Options{DisallowUnknownFields: true})
	var je *strictjson.Error
	if !errors.As(err, &je) || je.Key != "nope" || !errors.Is(err, strictjson.ErrUnknownField) || err.Error() != `unknown field "nope"` {
		t.Fatalf("unknown field: %v", err)
	}
	if err := strictjson.Unmarshal([]byte(` {"disk_name":"a","disk_size":3,"id":4,"errors":[{"type":"x"}]} `), &v); err != nil ||
		v.DiskName != "a" || v.Size != 3 || v.ID != 4 || v.Errs[0].Type != "x" {
		t.Fatalf("%+v %v", v, err)
	}
}

func TestCheckComparesKeysExactly(t *testing.T) {
	if err := strictjson.Check([]byte(`{"a":1,"A":2}`)); err != nil {
		t.Fatalf("Check folds keys: %v", err)
	}
	if err := strictjson.Check([]byte(`[{"a":1},{"a":1}]`)); err != nil {
		t.Fatalf("equal keys in two objects: %v", err)
	}
	err := strictjson.Check([]byte(`{"x":{"a":1,"a":1}}`))
	if !errors.Is(err, strictjson.ErrDuplicateKey) || !strings.Contains(err.Error(), "x.a") {
		t.Fatalf("%v", err)
	}
}

// Nesting is bounded as encoding/json bounds it, and a deep document
// costs memory in proportion to its size, not to its depth squared.
func TestDeepNestingIsRefusedCheaply(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	var v any
	err := strictjson.Unmarshal([]byte(deep), &v)
	if !errors.Is(err, strictjson.ErrNotJSON) || !strings.Contains(err.Error(), "10000") {
		t.Fatalf("100 000 levels: %v", err)
	}
	ok := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	if err := strictjson.Unmarshal([]byte(ok), &v); err != nil {
		t.Fatalf("5 000 levels: %v", err)
	}
	dup := strings.Repeat(`{"a":`, 300) + `{"k":1,"k":2}` + strings.Repeat("}", 300)
	err = strictjson.Unmarshal([]byte(dup), &v)
	if !errors.Is(err, strictjson.ErrDuplicateKey) || !strings.HasPrefix(err.Error(), "duplicate key in a JSON object at a.a.a") || len(err.Error()) > 600 {
		t.Fatalf("deep duplicate: %v", err)
	}
}

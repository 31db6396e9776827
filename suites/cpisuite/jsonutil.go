package cpisuite

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/cpilab/cpilab/cpiv2"
)

// jsonCID is a CID as it appears in an array result: a non-empty string.
type jsonCID string

func (c *jsonCID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil || s == "" {
		return fmt.Errorf("a CID must be a non-empty string, got %s", excerpt(b))
	}
	*c = jsonCID(s)
	return nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// mustJSON marshals v (values the suites build themselves).
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(fmt.Sprintf("%q", err.Error()))
	}
	return b
}

// hasKeys reports whether p is a hash with at least one key.
func hasKeys(p cpiv2.CloudProps) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(p.Raw(), &m) == nil && len(m) > 0
}

// mergeProps returns base with the keys of over set (over wins).
func mergeProps(base, over cpiv2.CloudProps) cpiv2.CloudProps {
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(base.Raw(), &m)
	var o map[string]json.RawMessage
	_ = json.Unmarshal(over.Raw(), &o)
	for k, v := range o {
		if m == nil {
			m = map[string]json.RawMessage{}
		}
		m[k] = v
	}
	return cpiv2.MustCloudProps(m)
}

// holdsProps reports whether the hash got holds every key of want with the
// same JSON value (a CPI may add keys of its own).
func holdsProps(got json.RawMessage, want cpiv2.CloudProps) bool {
	var g, w map[string]any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal(want.Raw(), &w) != nil {
		return false
	}
	for k, v := range w {
		if !reflect.DeepEqual(g[k], v) {
			return false
		}
	}
	return true
}

package suites

import (
	"encoding/json"
	"fmt"
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

package explore

import (
	"encoding/json"
	"testing"
)

// TestWithout: dropping a create renumbers the references after it and
// makes the ones to it missing.
func TestWithout(t *testing.T) {
	r := func(s string) json.RawMessage { return raw(s) }
	steps := []Step{
		{Method: "create_disk", Args: []json.RawMessage{raw(1024)}},
		{Method: "create_disk", Args: []json.RawMessage{raw(1024)}},
		{Method: "attach_disk", Args: []json.RawMessage{r("$vm:1"), r("$disk:2")}},
		{Method: "detach_disk", Args: []json.RawMessage{r("$vm:1"), r("$disk:1")}},
	}
	got := without(steps, 0)
	if len(got) != 3 || string(got[1].Args[1]) != `"$disk:1"` || string(got[2].Args[1]) != `"$disk:missing"` {
		t.Fatalf("without(0) = %v", got)
	}
	got = without(steps, 2)
	if len(got) != 3 || string(got[2].Args[1]) != `"$disk:1"` {
		t.Fatalf("without(2) = %v", got)
	}
}

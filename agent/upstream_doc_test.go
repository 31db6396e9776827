package agent_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/agent"
)

// Every knob restoring upstream's behaviour is listed in the agent section
// of docs/upstream.md, with the upstream commit it was read at.
func TestEveryKnobInUpstreamDoc(t *testing.T) {
	b, err := os.ReadFile("../docs/upstream.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Agent")
	if start < 0 {
		t.Fatal("docs/upstream.md has no Agent section")
	}
	section := doc[start:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	if !strings.Contains(section, "bosh-agent @e94765a") {
		t.Errorf("the agent section does not name the upstream commit it follows")
	}
	kt := reflect.TypeOf(agent.Knobs{})
	for i := range kt.NumField() {
		name := "`agent.Knobs." + kt.Field(i).Name + "`"
		if !strings.Contains(section, name) {
			t.Errorf("knob %s is not listed in docs/upstream.md's agent section", name)
		}
	}
}

package suites_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/suites"
)

// A CPI's error text with terminal escapes (clear screen, window title,
// an OSC 52 clipboard write) and NUL bytes is shown escaped in the text
// report and kept exact in the JSON report.
func TestReportsShowHostileTextEscaped(t *testing.T) {
	const hostile = "boom\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07\x00end"
	v := suites.Violation{Clause: "errors.delete-disk-missing", Did: hostile, Method: "delete_disk",
		Response: `{"error":{"message":"` + hostile + `"}}`, Stderr: hostile, ExitCode: 1}
	rep := &suites.CertifyReport{Specs: []suites.SpecResult{{Name: "spec", State: suites.StateFailed,
		Violations: []suites.Violation{v, v}}}}
	var text bytes.Buffer
	rep.WriteFailuresText(&text)
	suites.Failure{Spec: "spec", Violation: v, Also: []suites.Violation{v}}.WriteText(&text)
	suites.WriteCounts(&text, 0, 1, 1, map[string]int{hostile: 1})
	out := text.String()
	for _, raw := range []string{"\x1b", "\x07", "\x00"} {
		if strings.Contains(out, raw) {
			t.Fatalf("text report holds a raw %q:\n%q", raw, out)
		}
	}
	if !strings.Contains(out, `boom\x1b[2J\x1b]0;pwned\x07`) || !strings.Contains(out, `\x00end`) {
		t.Fatalf("text report does not show the escapes:\n%s", out)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Specs []struct {
			Violations []suites.Violation `json:"violations"`
		} `json:"specs"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Specs) != 1 || back.Specs[0].Violations[0].Did != hostile {
		t.Fatalf("JSON report did not keep the text exact: %v %+v", err, back)
	}
}

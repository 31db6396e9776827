package director_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
)

// knobRows returns, per knob named in the last column of a table row of
// the director's sections of docs/upstream.md (Director, CPI negotiation;
// the agent's section names the agent's knobs), those rows.
func knobRows(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../docs/upstream.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	ours := false
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			ours = strings.HasPrefix(h, "Director") || strings.HasPrefix(h, "CPI")
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if !ours || len(cells) != 4 {
			continue
		}
		knob := strings.Trim(strings.TrimSpace(cells[3]), "`")
		if knob != "" && knob != "—" && knob != "knob" && !strings.HasPrefix(knob, "---") {
			rows[knob] = append(rows[knob], line)
		}
	}
	return rows
}

// fileAndLine is an upstream file and line: "delete_dynamic_disk.rb:23",
// "jobs/director/spec:78".
var fileAndLine = regexp.MustCompile(`(\.rb|\.go|\.erb|/spec)` + "`?" + `:\d+`)

// Every knob is a row of docs/upstream.md (upstream's behaviour with its
// file and line, cpilab's, the knob), every row's knob exists, and the
// upstream profile sets every knob.
func TestEveryKnobIsDocumented(t *testing.T) {
	rows := knobRows(t)
	typ := reflect.TypeOf(director.Knobs{})
	fields := map[string]bool{}
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		fields[name] = true
		if len(rows[name]) == 0 {
			t.Errorf("knob %s is not listed in docs/upstream.md", name)
		}
		for _, row := range rows[name] {
			if !fileAndLine.MatchString(row) {
				t.Errorf("docs/upstream.md row of %s names no upstream file and line (file.rb:N): %s", name, row)
			}
		}
	}
	for knob := range rows {
		if !fields[knob] {
			t.Errorf("docs/upstream.md lists knob %s, which director.Knobs does not have", knob)
		}
	}
	up, err := director.Profile(director.ProfileUpstream)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(up)
	for i := range v.NumField() {
		if !v.Field(i).Bool() {
			t.Errorf("the upstream profile leaves %s unset", typ.Field(i).Name)
		}
	}
	if ref, _ := director.Profile(director.ProfileReference); ref != (director.Knobs{}) {
		t.Errorf("the reference profile sets knobs: %+v", ref)
	}
}

// Under V2InfoErrorMeansV1 a director-v2 caller takes any info error as a
// CPI of api_version 1, as the v2-era Director did; otherwise, and for the
// other profiles, only NotImplemented does.
func TestV2InfoErrorMeansV1(t *testing.T) {
	down := cpiv2.NewError(cpiv2.TypeCloudError, "IaaS down")
	for _, tc := range []struct {
		knob    bool
		profile cpiv2.Profile
		want    int // 0: the error
	}{
		{true, cpiv2.ProfileDirectorV2, 1},
		{false, cpiv2.ProfileDirectorV2, 0},
		{true, cpiv2.ProfileDirectorCurrent, 0},
		{true, cpiv2.ProfileCLI, 0},
	} {
		p := director.CPIProfile(director.Knobs{V2InfoErrorMeansV1: tc.knob}, tc.profile)
		v, err := p.Negotiate(cpiv2.Info{}, down)
		if tc.want == 0 && err == nil || tc.want != 0 && (err != nil || v != tc.want) {
			t.Errorf("knob %v, %s: Negotiate = %d, %v; want %d", tc.knob, tc.profile.Name, v, err, tc.want)
		}
	}
}

package cpimodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

func diffVM(x, y VM, loose []string) (field, did string) {
	l := func(f string) bool { return slices.Contains(loose, f) }
	switch {
	case x.AgentID != y.AgentID:
		return "agent_id", x.AgentID + " → " + y.AgentID
	case x.Stemcell != y.Stemcell:
		return "stemcell", x.Stemcell + " → " + y.Stemcell
	case !jsonEqual(x.CloudProperties, y.CloudProperties):
		return "cloud_properties", excerpt(x.CloudProperties) + " → " + excerpt(y.CloudProperties)
	case !jsonEqual(x.Networks, y.Networks):
		return "networks", excerpt(x.Networks) + " → " + excerpt(y.Networks)
	case !jsonEqual(x.Env, y.Env):
		return "env", excerpt(x.Env) + " → " + excerpt(y.Env)
	case !jsonEqual(x.UserData, y.UserData):
		return "user_data", diffJSON(x.UserData, y.UserData)
	case x.Size != y.Size:
		return "size", x.Size + " → " + y.Size
	case !l("boots") && x.Boots != y.Boots:
		return "boots", fmt.Sprintf("booted %d more time(s)", y.Boots-x.Boots)
	}
	if !l("metadata") {
		if f, did := diffMeta(x.Metadata, y.Metadata); f != "" {
			return "metadata." + f, did
		}
	}
	for _, d := range sortedKeys(union(x.Disks, y.Disks)) {
		if l("disks." + d) {
			continue
		}
		a, okX := x.Disks[d]
		b, okY := y.Disks[d]
		switch {
		case okX && !okY:
			return "disks." + d, "disk " + d + " was detached"
		case !okX && okY:
			return "disks." + d, "disk " + d + " was attached"
		case !l("devices") && a != b:
			return "disks." + d + ".device", fmt.Sprintf("%s (LUN %d) → %s (LUN %d)", a.Device, a.LUN, b.Device, b.LUN)
		}
	}
	return "", ""
}

func diffDisk(x, y Disk, loose []string) (field, did string) {
	l := func(f string) bool { return slices.Contains(loose, f) }
	switch {
	case !l("size_mib") && x.SizeMiB != y.SizeMiB:
		return "size_mib", fmt.Sprintf("%d → %d MiB", x.SizeMiB, y.SizeMiB)
	case !l("cloud_properties") && !jsonEqual(x.CloudProperties, y.CloudProperties):
		return "cloud_properties", excerpt(x.CloudProperties) + " → " + excerpt(y.CloudProperties)
	case !l("attached_to") && x.AttachedTo != y.AttachedTo:
		return "attached_to", fmt.Sprintf("%q → %q", x.AttachedTo, y.AttachedTo)
	}
	if !l("metadata") {
		if f, did := diffMeta(x.Metadata, y.Metadata); f != "" {
			return "metadata." + f, did
		}
	}
	return "", ""
}

// diffMeta names the first key that differs.
func diffMeta(x, y map[string]string) (field, did string) {
	for _, k := range sortedKeys(union(x, y)) {
		a, okX := x[k]
		b, okY := y[k]
		switch {
		case okX && !okY:
			return k, fmt.Sprintf("%q lost", k)
		case !okX && okY:
			return k, fmt.Sprintf("%q=%q added", k, b)
		case a != b:
			return k, fmt.Sprintf("%q → %q", a, b)
		}
	}
	return "", ""
}

// holdsMeta: every key asked is in got with its value, up to the
// sanitising a cloud imposes (case, characters outside [a-z0-9], length);
// an empty value may be dropped.
func holdsMeta(got, want map[string]string) (field, did string) {
	for _, k := range sortedKeys(want) {
		v := want[k]
		gk, ok := findKey(got, k)
		if !ok {
			if v == "" {
				continue
			}
			return k, fmt.Sprintf("the key %q is missing (the object has %v)", k, sortedKeys(got))
		}
		if !sanitisedEqual(v, got[gk]) {
			return k, fmt.Sprintf("%q is %q, asked %q", k, got[gk], v)
		}
	}
	return "", ""
}

func findKey(m map[string]string, k string) (string, bool) {
	if _, ok := m[k]; ok {
		return k, true
	}
	for _, g := range sortedKeys(m) {
		if sanitisedEqual(k, g) {
			return g, true
		}
	}
	return "", false
}

// sanitisedEqual: got is asked as a cloud may store it: the same, or the
// same once both are lower-cased with every character outside [a-z0-9]
// made '-', possibly cut to a length limit of at least 63.
func sanitisedEqual(asked, got string) bool {
	if asked == got {
		return true
	}
	a, g := norm(asked), norm(got)
	if a == g {
		return true
	}
	return len(g) >= 63 && strings.HasPrefix(a, g)
}

func norm(s string) string {
	return strings.Map(func(r rune) rune {
		r = unicode.ToLower(r)
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, s)
}

// holdsProps returns the first key path of want that got lacks or holds
// with another value ("" when got holds every member of want).
func holdsProps(got, want json.RawMessage) string {
	var w, g any
	if len(want) == 0 || json.Unmarshal(want, &w) != nil {
		return ""
	}
	if len(got) > 0 {
		_ = json.Unmarshal(got, &g)
	}
	return holds(g, w, "")
}

func holds(got, want any, path string) string {
	wm, ok := want.(map[string]any)
	if !ok {
		if !jsonEqualValue(got, want) {
			if path == "" {
				return "."
			}
			return path
		}
		return ""
	}
	gm, _ := got.(map[string]any)
	for _, k := range sortedKeys(wm) {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if f := holds(gm[k], wm[k], p); f != "" {
			return f
		}
	}
	return ""
}

func jsonEqualValue(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// jsonEqual compares two JSON texts by value (absent and null are equal).
func jsonEqual(x, y json.RawMessage) bool {
	if bytes.Equal(x, y) {
		return true
	}
	var a, b any
	if len(x) > 0 {
		if json.Unmarshal(x, &a) != nil {
			return false
		}
	}
	if len(y) > 0 {
		if json.Unmarshal(y, &b) != nil {
			return false
		}
	}
	return jsonEqualValue(a, b)
}

// diffJSON names the first member path where two JSON hashes differ.
func diffJSON(x, y json.RawMessage) string {
	var a, b any
	_ = json.Unmarshal(x, &a)
	_ = json.Unmarshal(y, &b)
	if p := firstDiff(a, b, ""); p != "" {
		return p
	}
	return "."
}

func firstDiff(a, b any, path string) string {
	am, okA := a.(map[string]any)
	bm, okB := b.(map[string]any)
	if !okA || !okB {
		if jsonEqualValue(a, b) {
			return ""
		}
		if path == "" {
			return "."
		}
		return path
	}
	for _, k := range sortedKeys(union(am, bm)) {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if d := firstDiff(am[k], bm[k], p); d != "" {
			return d
		}
	}
	return ""
}

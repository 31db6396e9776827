package suites

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// ValidateJSONSchema checks doc against schema, for the subset of JSON
// Schema (2020-12) that docs/report.schema.json uses: type (one or a
// list), properties, required, additionalProperties (a boolean or a
// schema), items, enum, const, minimum, minLength, and $ref to
// "#/$defs/NAME". Annotations (title, description, format, examples,
// $schema, $id) are ignored; any other keyword is refused, so that the
// schema cannot say more than is checked. It returns every violation, each
// with its JSON pointer.
func ValidateJSONSchema(schema, doc []byte) error {
	var s, d any
	if err := json.Unmarshal(schema, &s); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return fmt.Errorf("document: %w", err)
	}
	root, ok := s.(map[string]any)
	if !ok {
		return fmt.Errorf("schema: not an object")
	}
	v := &schemaValidator{root: root}
	v.check(root, d, "")
	if len(v.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d schema violations:\n  %s", len(v.errs), strings.Join(v.errs, "\n  "))
}

type schemaValidator struct {
	root map[string]any
	errs []string
}

var schemaAnnotations = []string{"title", "description", "format", "examples", "$schema", "$id", "$defs", "$comment"}

func (v *schemaValidator) fail(ptr, format string, args ...any) {
	if ptr == "" {
		ptr = "/"
	}
	v.errs = append(v.errs, ptr+": "+fmt.Sprintf(format, args...))
}

func (v *schemaValidator) check(s map[string]any, d any, ptr string) {
	if ref, ok := s["$ref"].(string); ok {
		name, found := strings.CutPrefix(ref, "#/$defs/")
		defs, _ := v.root["$defs"].(map[string]any)
		target, ok := defs[name].(map[string]any)
		if !found || !ok {
			v.fail(ptr, "schema: unresolved $ref %q", ref)
			return
		}
		v.check(target, d, ptr)
		return
	}
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kw := s[k]
		switch k {
		case "type":
			v.checkType(kw, d, ptr)
		case "enum":
			list, _ := kw.([]any)
			if !slices.ContainsFunc(list, func(e any) bool { return jsonEqual(e, d) }) {
				v.fail(ptr, "%s is not one of %v", short(d), list)
			}
		case "const":
			if !jsonEqual(kw, d) {
				v.fail(ptr, "%s is not %v", short(d), kw)
			}
		case "minimum":
			if n, ok := number(d); ok && n < kw.(float64) {
				v.fail(ptr, "%v is below the minimum %v", n, kw)
			}
		case "minLength":
			if str, ok := d.(string); ok && float64(len([]rune(str))) < kw.(float64) {
				v.fail(ptr, "%q is shorter than %v", str, kw)
			}
		case "required":
			obj, ok := d.(map[string]any)
			if !ok {
				continue
			}
			for _, r := range kw.([]any) {
				if _, ok := obj[r.(string)]; !ok {
					v.fail(ptr, "required property %q is missing", r)
				}
			}
		case "properties":
			obj, ok := d.(map[string]any)
			if !ok {
				continue
			}
			for name, ps := range kw.(map[string]any) {
				if val, ok := obj[name]; ok {
					v.check(ps.(map[string]any), val, ptr+"/"+name)
				}
			}
		case "additionalProperties":
			obj, ok := d.(map[string]any)
			if !ok {
				continue
			}
			props, _ := s["properties"].(map[string]any)
			for name, val := range obj {
				if _, known := props[name]; known {
					continue
				}
				switch ap := kw.(type) {
				case bool:
					if !ap {
						v.fail(ptr, "property %q is not in the schema", name)
					}
				case map[string]any:
					v.check(ap, val, ptr+"/"+name)
				}
			}
		case "items":
			arr, ok := d.([]any)
			if !ok {
				continue
			}
			for i, e := range arr {
				v.check(kw.(map[string]any), e, fmt.Sprintf("%s/%d", ptr, i))
			}
		default:
			if !slices.Contains(schemaAnnotations, k) {
				v.fail(ptr, "schema: keyword %q is not supported by this validator", k)
			}
		}
	}
}

func (v *schemaValidator) checkType(kw, d any, ptr string) {
	var types []string
	switch t := kw.(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, x.(string))
		}
	}
	for _, t := range types {
		if hasType(t, d) {
			return
		}
	}
	v.fail(ptr, "%s is not of type %s", short(d), strings.Join(types, " or "))
}

func hasType(t string, d any) bool {
	switch t {
	case "null":
		return d == nil
	case "boolean":
		_, ok := d.(bool)
		return ok
	case "string":
		_, ok := d.(string)
		return ok
	case "object":
		_, ok := d.(map[string]any)
		return ok
	case "array":
		_, ok := d.([]any)
		return ok
	case "number":
		_, ok := number(d)
		return ok
	case "integer":
		n, ok := number(d)
		return ok && n == math.Trunc(n)
	}
	return false
}

func number(d any) (float64, bool) {
	switch n := d.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	}
	return 0, false
}

func jsonEqual(a, b any) bool {
	if na, ok := number(a); ok {
		nb, ok := number(b)
		return ok && na == nb
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func short(d any) string {
	b, _ := json.Marshal(d)
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}

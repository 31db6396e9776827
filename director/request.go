package director

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/cpilab/cpilab/internal/strictjson"
)

// The dynamic disks endpoints read their bodies as upstream's controller
// does (dynamic_disks_controller.rb with validation_helper.rb's
// safe_property): a JSON object, each property checked for presence, type
// and bounds at request time (400 with upstream's code and wording); what
// the properties name (instance, pool, deployment, disk) is looked up by
// the task.

// jsonBody is a decoded request body: a JSON object.
type jsonBody struct {
	m map[string]any
}

// readJSONObject reads r's body as one JSON object. Upstream answers a body
// that is not JSON with 500 (Knobs.MalformedJSONServerError); cpilab with
// 400 naming the body.
func readJSONObject(r *http.Request, k Knobs) (jsonBody, error) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		return jsonBody{}, &Error{Status: http.StatusNotFound, Code: CodeResourceNotFound,
			Message: fmt.Sprintf("Endpoint '%s' not found (it consumes application/json; got Content-Type %q)", r.URL.Path, r.Header.Get("Content-Type"))}
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return jsonBody{}, err
	}
	var v any
	if k.LenientDuplicateKeys {
		err = lenientDecode(b, &v)
	} else if err = strictjson.Decode(b, &v, strictjson.Options{FoldKeys: true, UseNumber: true}); errors.Is(err, strictjson.ErrDuplicateKey) {
		// Ruby's JSON.parse keeps the last of two equal keys; cpilab
		// refuses the ambiguity (docs/security.md).
		var je *strictjson.Error
		errors.As(err, &je)
		return jsonBody{}, badField(je.Key, "is ambiguous: %s", je.Detail)
	}
	if err != nil {
		if k.MalformedJSONServerError {
			return jsonBody{}, errServerError
		}
		if errors.Is(err, io.EOF) || errors.Is(err, strictjson.ErrEmpty) {
			return jsonBody{}, badField("body", "is empty; a JSON object is required")
		}
		return jsonBody{}, badField("body", "not valid JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return jsonBody{}, validation(CodeValidationInvalidType, "body", "Object (%s) did not match the required type 'Hash'", inspect(v))
	}
	return jsonBody{m: m}, nil
}

// lenientDecode reads b as upstream's JSON.parse does: the last of two
// equal keys wins (Knobs.LenientDuplicateKeys); bytes that are not UTF-8
// and anything after the value are still refused.
func lenientDecode(b []byte, v *any) error {
	if !utf8.Valid(b) {
		// encoding/json would turn the bad bytes into U+FFFD, and a name
		// would be recorded as another; Ruby's JSON.parse refuses them.
		return fmt.Errorf("invalid UTF-8 at byte %d", firstInvalidUTF8(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// inspect shows a JSON value in a message.
func inspect(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// str is a required (or optional) string property of at least one
// character; a number is taken as its text, as upstream does.
func (b jsonBody) str(name string, optional bool) (string, error) {
	v, ok := b.m[name]
	if !ok {
		if optional {
			return "", nil
		}
		return "", validation(CodeValidationMissing, name, "Required property '%s' was not specified in object (%s)", name, inspect(b.m))
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	default:
		return "", validation(CodeValidationInvalidType, name, "Property '%s' value (%s) did not match the required type 'String'", name, inspect(v))
	}
	if len(s) < 1 {
		return "", validation(CodeValidationViolatedMin, name, "'%s' length (0) should be greater than 1", name)
	}
	return s, nil
}

// integer is a required integer property of at least min.
func (b jsonBody) integer(name string, min int) (int, error) {
	v, ok := b.m[name]
	if !ok {
		return 0, validation(CodeValidationMissing, name, "Required property '%s' was not specified in object (%s)", name, inspect(b.m))
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil || strings.ContainsAny(n.String(), ".eE") {
		return 0, validation(CodeValidationInvalidType, name, "Property '%s' value (%s) did not match the required type 'Integer'", name, inspect(v))
	}
	if int(i) < min {
		return 0, validation(CodeValidationViolatedMin, name, "'%s' value (%d) should be greater than %d", name, i, min)
	}
	return int(i), nil
}

// hash is an optional object property (nil when absent).
func (b jsonBody) hash(name string) (map[string]any, error) {
	v, ok := b.m[name]
	if !ok {
		return nil, nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		return nil, validation(CodeValidationInvalidType, name, "Property '%s' value (%s) did not match the required type 'Hash'", name, inspect(v))
	}
	return plainJSON(m), nil
}

// plainJSON turns json.Numbers back into float64 or int64 values, so a
// stored hash compares and encodes as plain JSON.
func plainJSON(v map[string]any) map[string]any {
	var conv func(any) any
	conv = func(x any) any {
		switch t := x.(type) {
		case json.Number:
			if i, err := t.Int64(); err == nil {
				return i
			}
			f, _ := t.Float64()
			return f
		case map[string]any:
			out := make(map[string]any, len(t))
			for k, e := range t {
				out[k] = conv(e)
			}
			return out
		case []any:
			out := make([]any, len(t))
			for i, e := range t {
				out[i] = conv(e)
			}
			return out
		}
		return x
	}
	return conv(v).(map[string]any)
}

// fields runs each check in order and returns the first error.
func fields(checks ...func() error) error {
	for _, c := range checks {
		if err := c(); err != nil {
			return err
		}
	}
	return nil
}

func (b jsonBody) strTo(dst *string, name string) func() error {
	return func() (err error) { *dst, err = b.str(name, false); return }
}

func (b jsonBody) optStrTo(dst *string, name string) func() error {
	return func() (err error) { *dst, err = b.str(name, true); return }
}

func (b jsonBody) intTo(dst *int, name string, min int) func() error {
	return func() (err error) { *dst, err = b.integer(name, min); return }
}

func (b jsonBody) hashTo(dst *map[string]any, name string) func() error {
	return func() (err error) { *dst, err = b.hash(name); return }
}

// parseProvide reads POST /dynamic_disks/provide's body in upstream's
// order: instance_id, disk_name, disk_pool_name, disk_size, metadata.
func parseProvide(b jsonBody) (ProvideRequest, error) {
	var q ProvideRequest
	return q, fields(b.strTo(&q.InstanceID, "instance_id"), b.strTo(&q.DiskName, "disk_name"),
		b.strTo(&q.DiskPoolName, "disk_pool_name"), b.intTo(&q.DiskSize, "disk_size", 1), b.hashTo(&q.Metadata, "metadata"))
}

// parseCreate reads POST /dynamic_disks's body in upstream's order:
// deployment_name, az, disk_name, disk_pool_name, disk_size, metadata. With
// cpilab's instance_id, deployment_name and az may be left out.
func parseCreate(b jsonBody) (CreateDiskRequest, error) {
	var q CreateDiskRequest
	if err := b.optStrTo(&q.InstanceID, "instance_id")(); err != nil {
		return q, err
	}
	dep, az := b.strTo(&q.Deployment, "deployment_name"), b.strTo(&q.AZ, "az")
	if q.InstanceID != "" {
		dep, az = b.optStrTo(&q.Deployment, "deployment_name"), b.optStrTo(&q.AZ, "az")
	}
	return q, fields(dep, az, b.strTo(&q.DiskName, "disk_name"), b.strTo(&q.DiskPoolName, "disk_pool_name"),
		b.intTo(&q.DiskSize, "disk_size", 1), b.hashTo(&q.Metadata, "metadata"))
}

// parseAttach reads POST /dynamic_disks/:disk_name/attach's body:
// instance_id, metadata.
func parseAttach(b jsonBody, name string) (AttachRequest, error) {
	q := AttachRequest{DiskName: name}
	return q, fields(b.strTo(&q.InstanceID, "instance_id"), b.hashTo(&q.Metadata, "metadata"))
}

// firstInvalidUTF8 is the offset of the first byte of b that is not valid
// UTF-8 (len(b) when there is none).
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

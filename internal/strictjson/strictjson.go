// Package strictjson is cpilab's one JSON policy for input it did not write.
// A CPI's stdout, Director API bodies, fakeiaas API bodies, the Docker face,
// FlexVolume options and config, merge reports, scenario files and CPI
// configs are all read through it. It refuses what a lenient reader would
// silently reinterpret:
//
//   - an object holding the same key twice, at any depth (encoding/json,
//     like Ruby's JSON.parse, keeps the last: `"verdict":"fail",
//     "verdict":"pass"` would read as a pass);
//   - in an object decoded into a Go struct, two keys that differ only in
//     case (`"disk_name"` beside `"Disk_Name"`: encoding/json matches
//     struct fields case-insensitively, so the last would win); with
//     Options.FoldKeys, in the top-level object too;
//   - invalid UTF-8 and lone UTF-16 surrogate escapes (read as U+FFFD);
//   - anything after the one JSON value.
//
// Every refusal is an *Error naming the key's path ("disk_name",
// "error.type", "seeds[2].verdict") and matching its Kind with errors.Is.
//
//	var req ProvideRequest
//	if err := strictjson.Unmarshal(body, &req); err != nil {
//		var je *strictjson.Error
//		if errors.As(err, &je) && je.Key != "" { … 400 naming je.Key … }
//	}
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The kinds of refusal; an *Error matches its Kind with errors.Is.
var (
	// ErrDuplicateKey: an object holds a key twice (or two keys differing
	// only in case where that is ambiguous).
	ErrDuplicateKey = errors.New("duplicate key in a JSON object")
	// ErrInvalidUTF8: bytes that are not UTF-8, or a lone surrogate escape.
	ErrInvalidUTF8 = errors.New("not valid UTF-8")
	// ErrNotJSON: not a JSON value.
	ErrNotJSON = errors.New("not JSON")
	// ErrTruncated: the input ends inside the value.
	ErrTruncated = errors.New("the JSON value is truncated")
	// ErrTrailingData: something after the one JSON value.
	ErrTrailingData = errors.New("data after the JSON value")
	// ErrEmpty: no value at all (only white space).
	ErrEmpty = errors.New("no JSON value")
	// ErrType: a value of the wrong type for the Go value decoded into
	// (Decode's second step, encoding/json's errors).
	ErrType = errors.New("JSON value of the wrong type")
	// ErrUnknownField: a key no struct field takes
	// (Options.DisallowUnknownFields).
	ErrUnknownField = errors.New("unknown field")
)

// Error is input the policy refuses.
type Error struct {
	Kind   error  // one of the Err* values above
	Key    string // path of the offending key, "" when none ("a.b[1].c")
	Detail string // what exactly, e.g. the offset or the two spellings
	Cause  error  // the underlying encoding/json error, if any
}

func (e *Error) Error() string {
	if e.Kind == ErrUnknownField {
		return fmt.Sprintf("unknown field %q", e.Key)
	}
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Key != "" {
		fmt.Fprintf(&b, " at %s", e.Key)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Is matches the Kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// Options adjust Decode.
type Options struct {
	// FoldKeys refuses keys differing only in case in the top-level
	// object as well, not only in objects decoded into a struct: for a
	// body read into a map whose keys are then looked up as property
	// names (the Director's API). Nested maps (metadata) keep exact keys.
	FoldKeys bool
	// DisallowUnknownFields refuses a key no struct field takes.
	DisallowUnknownFields bool
	// UseNumber decodes numbers into interface values as json.Number.
	UseNumber bool
}

// Check reports whether b is one JSON value a strict reader takes exactly
// as written: valid UTF-8, no lone surrogate escape, no object with the
// same key twice (compared exactly, after unescaping), nothing after the
// value.
func Check(b []byte) error { return check(b, nil, false) }

// Unmarshal is Decode with default Options: json.Unmarshal under the
// policy.
func Unmarshal(b []byte, v any) error { return Decode(b, v, Options{}) }

// Decode checks b (as Check, and also refusing case-variant keys in the
// objects decoding into v matches against a struct's fields, or, with
// FoldKeys, in the top-level object) and then decodes it into v.
// A type mismatch or an unknown field (DisallowUnknownFields) is an
// *Error of kind ErrType or ErrUnknownField naming the field.
func Decode(b []byte, v any, o Options) error {
	if err := check(b, reflect.TypeOf(v), o.FoldKeys); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if o.DisallowUnknownFields {
		dec.DisallowUnknownFields()
	}
	if o.UseNumber {
		dec.UseNumber()
	}
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &Error{Kind: ErrType, Key: te.Field, Detail: fmt.Sprintf("must be %s, got a JSON %s", te.Type, te.Value), Cause: err}
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return &Error{Kind: ErrUnknownField, Key: strings.Trim(f, `"`), Cause: err}
		}
		return &Error{Kind: ErrType, Detail: err.Error(), Cause: err}
	}
	return nil
}

func check(b []byte, t reflect.Type, foldTop bool) error {
	if !utf8.Valid(b) {
		off := invalidUTF8Offset(b)
		return &Error{Kind: ErrInvalidUTF8, Detail: fmt.Sprintf("byte 0x%02x at offset %d is not UTF-8", b[off], off)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return &Error{Kind: ErrEmpty}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // tokens only: never convert numbers
	c := checker{dec: dec, foldTop: foldTop}
	if err := c.value(t); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return &Error{Kind: ErrTrailingData, Detail: fmt.Sprintf("at offset %d", dec.InputOffset())}
	}
	if off, ok := loneSurrogate(b); ok {
		return &Error{Kind: ErrInvalidUTF8, Detail: fmt.Sprintf("the escape at offset %d is a lone UTF-16 surrogate, not a character", off)}
	}
	return nil
}

type checker struct {
	dec     *json.Decoder
	foldTop bool
	// at is the path to the value being read, one segment a level
	// ("key" or "[3]"), joined only for an error: a string per level
	// would cost the square of the depth.
	at []string
}

// MaxDepth is the deepest nesting of objects and arrays accepted, as
// encoding/json's own limit.
const MaxDepth = 10000

// path joins the segments of c.at as errors show them: a.b[1].c (at most
// 200 bytes of it, then "…").
func (c *checker) path() string {
	var b strings.Builder
	for _, seg := range c.at {
		if b.Len() > 200 {
			b.WriteString("…")
			break
		}
		if !strings.HasPrefix(seg, "[") {
			if strings.ContainsAny(seg, ".[]\"") || seg == "" {
				seg = strconv.Quote(seg)
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
		}
		b.WriteString(seg)
	}
	return b.String()
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// shape reduces t to what decides how its JSON is matched: nil when
// unknown (an interface, a custom unmarshaler, no type).
func shape(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
			return nil
		}
		if t.Kind() != reflect.Pointer {
			return t
		}
		t = t.Elem()
	}
	return nil
}

// value reads one value's tokens, refusing duplicate keys; c.at names the
// value for errors (empty: the top level); t is the Go type it decodes
// into (nil: unknown).
func (c *checker) value(t reflect.Type) error {
	tok, err := c.dec.Token()
	if err != nil {
		return tokenError(err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	if len(c.at) >= MaxDepth {
		return &Error{Kind: ErrNotJSON, Key: c.path(), Detail: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
	}
	t = shape(t)
	switch d {
	case '{':
		var fields map[string]reflect.Type // struct: folded json name → field type
		var elem reflect.Type
		fold := c.foldTop && len(c.at) == 0
		if t != nil {
			switch t.Kind() {
			case reflect.Struct:
				fields, fold = structFields(t), true
			case reflect.Map:
				elem = t.Elem()
			}
		}
		seen := map[string]string{} // compared key → as written
		for c.dec.More() {
			kt, err := c.dec.Token()
			if err != nil {
				return tokenError(err)
			}
			k, _ := kt.(string) // the decoder guarantees a string key here
			ck := k
			if fold {
				ck = foldKey(k)
			}
			if first, dup := seen[ck]; dup {
				if first == k {
					return &Error{Kind: ErrDuplicateKey, Key: JoinPath(c.path(), k),
						Detail: fmt.Sprintf("key %q appears twice in the same object (a lenient reader would keep the last)", k)}
				}
				return &Error{Kind: ErrDuplicateKey, Key: JoinPath(c.path(), k),
					Detail: fmt.Sprintf("keys %q and %q differ only in case (a lenient reader would take either for the same field)", first, k)}
			}
			seen[ck] = k
			next := elem
			if fields != nil {
				next = fields[foldKey(k)]
			}
			c.at = append(c.at, k)
			err = c.value(next)
			c.at = c.at[:len(c.at)-1]
			if err != nil {
				return err
			}
		}
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; c.dec.More(); i++ {
			c.at = append(c.at, "["+strconv.Itoa(i)+"]")
			err := c.value(elem)
			c.at = c.at[:len(c.at)-1]
			if err != nil {
				return err
			}
		}
	}
	if _, err := c.dec.Token(); err != nil { // the closing delimiter
		return tokenError(err)
	}
	return nil
}

// foldKey is the form two keys share when encoding/json would match both
// to the same struct field (its matching is Unicode case folding).
func foldKey(k string) string { return strings.ToLower(strings.ToUpper(k)) }

// structFields maps the folded JSON name of each field of struct t (as
// encoding/json names them, embedded structs flattened) to its type.
func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var walk func(t reflect.Type, depth int)
	walk = func(t reflect.Type, depth int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct && depth < 8 {
					walk(et, depth+1)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, ok := out[foldKey(name)]; !ok {
				out[foldKey(name)] = ft
			}
		}
	}
	walk(t, 0)
	return out
}

// JoinPath appends key to a JSON path as errors show it: a.b, a["x.y"].
func JoinPath(path, key string) string {
	if strings.ContainsAny(key, ".[]\"") || key == "" {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func tokenError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Kind: ErrTruncated, Cause: io.ErrUnexpectedEOF}
	}
	return &Error{Kind: ErrNotJSON, Detail: err.Error(), Cause: err}
}

// loneSurrogate finds a \uD800–\uDFFF escape in a string of b (valid
// JSON) that is not a high surrogate followed by a low one: encoding/json
// would read it as U+FFFD.
func loneSurrogate(b []byte) (int, bool) {
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			in = !in
		case c == '\\' && in:
			if i+1 < len(b) && b[i+1] == 'u' {
				r, ok := hex4(b, i+2)
				switch {
				case !ok || r < 0xD800 || r > 0xDFFF:
				case r <= 0xDBFF && i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u':
					if lo, ok := hex4(b, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
						i += 11 // the pair
						continue
					}
					return i, true
				default:
					return i, true
				}
				i += 5
				continue
			}
			i++ // the escaped character
		}
	}
	return 0, false
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(n), err == nil
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return 0
}

package cpiv2

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckJSON reports whether b is one JSON value that a strict reader takes
// exactly as written: valid UTF-8 throughout (no lone UTF-16 surrogate
// escapes either) and no object with the same key twice (keys compared
// after unescaping, at any depth). encoding/json,
// like most parsers, silently replaces invalid UTF-8 with U+FFFD and keeps
// the last of two equal keys, so `{"error":{…},"error":null,"result":"x"}`
// would read as a success; CheckJSON refuses both.
//
// The error is an *InvalidResponseError of kind ErrInvalidUTF8 (Detail
// gives the byte offset), ErrDuplicateKey (Key is the path of the repeated
// key, e.g. "error.type" or "result[1].name"), ErrTruncatedOutput or
// ErrNotJSON. Suites checking raw CPI output call it too, so every reader in
// cpilab applies the same rule.
func CheckJSON(b []byte) error {
	if !utf8.Valid(b) {
		off := invalidUTF8Offset(b)
		return invalid(ErrInvalidUTF8, b, "", fmt.Sprintf("byte 0x%02x at offset %d is not UTF-8", b[off], off), nil)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // tokens only: never convert numbers
	if err := checkValue(dec, ""); err != nil {
		var ir *InvalidResponseError
		if errors.As(err, &ir) && ir.Excerpt == "" {
			ir.Excerpt = excerpt(b)
		}
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid(ErrTrailingGarbage, b, "", fmt.Sprintf("data after the JSON value at offset %d", dec.InputOffset()), nil)
	}
	if off, ok := loneSurrogate(b); ok {
		return invalid(ErrInvalidUTF8, b, "", fmt.Sprintf("the escape at offset %d is a lone UTF-16 surrogate, not a character", off), nil)
	}
	return nil
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

// checkValue reads one value's tokens from dec, refusing duplicate keys.
// path names the value for error messages ("" is the top level).
func checkValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return tokenError(err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return tokenError(err)
			}
			k, _ := kt.(string) // the decoder guarantees a string key here
			kp := joinPath(path, k)
			if seen[k] {
				return &InvalidResponseError{Kind: ErrDuplicateKey, Key: kp,
					Detail: fmt.Sprintf("key %q appears twice in the same object (a lenient reader would keep the last)", k)}
			}
			seen[k] = true
			if err := checkValue(dec, kp); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return tokenError(err)
	}
	return nil
}

func joinPath(path, key string) string {
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
		return &InvalidResponseError{Kind: ErrTruncatedOutput, Cause: err}
	}
	return &InvalidResponseError{Kind: ErrNotJSON, Detail: err.Error(), Cause: err}
}

package cpiv2

import (
	"errors"

	"github.com/cpilab/cpilab/internal/strictjson"
)

// CheckJSON reports whether b is one JSON value that a strict reader takes
// exactly as written: valid UTF-8 throughout (no lone UTF-16 surrogate
// escapes either) and no object with the same key twice (keys compared
// after unescaping, at any depth). encoding/json,
// like most parsers, silently replaces invalid UTF-8 with U+FFFD and keeps
// the last of two equal keys, so `{"error":{…},"error":null,"result":"x"}`
// would read as a success; CheckJSON refuses both. It is cpilab's one JSON
// policy (internal/strictjson), which every reader of untrusted JSON
// applies.
//
// The error is an *InvalidResponseError of kind ErrInvalidUTF8 (Detail
// gives the byte offset), ErrDuplicateKey (Key is the path of the repeated
// key, e.g. "error.type" or "result[1].name"), ErrTruncatedOutput or
// ErrNotJSON. Suites checking raw CPI output call it too, so every reader in
// cpilab applies the same rule.
func CheckJSON(b []byte) error {
	err := strictjson.Check(b)
	if err == nil {
		return nil
	}
	var je *strictjson.Error
	if !errors.As(err, &je) {
		return invalid(ErrNotJSON, b, "", err.Error(), err)
	}
	kind := ErrNotJSON
	switch {
	case errors.Is(je, strictjson.ErrInvalidUTF8):
		kind = ErrInvalidUTF8
	case errors.Is(je, strictjson.ErrDuplicateKey):
		kind = ErrDuplicateKey
	case errors.Is(je, strictjson.ErrTruncated), errors.Is(je, strictjson.ErrEmpty):
		kind = ErrTruncatedOutput
	case errors.Is(je, strictjson.ErrTrailingData):
		kind = ErrTrailingGarbage
	}
	ir := invalid(kind, b, je.Key, je.Detail, je.Cause)
	if kind == ErrTruncatedOutput && je.Cause == nil {
		ir.Cause = nil
	}
	return ir
}

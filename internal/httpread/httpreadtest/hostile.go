// Package httpreadtest serves the hostile answers every HTTP client in
// cpilab is tested against: a body that never ends and a body one byte
// over a cap.
//
//	srv := httptest.NewServer(httpreadtest.Endless(http.StatusOK))
//	… the client under test must return an error wrapping or naming
//	httpread's cap, never read without end …
package httpreadtest

import (
	"bytes"
	"net/http"
)

// Endless answers every request with status and a JSON-looking body that
// never ends (it stops when the client goes away).
func Endless(status int) http.Handler {
	chunk := bytes.Repeat([]byte(`{"a":[`), 4<<10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
}

// Oversize answers every request with status and a body of exactly n
// bytes (a JSON string, so a lenient reader would take it).
func Oversize(status int, n int64) http.Handler {
	body := make([]byte, n)
	for i := range body {
		body[i] = 'x'
	}
	if n >= 2 {
		body[0], body[n-1] = '"', '"'
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	})
}

package fakeiaas

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/internal/strictjson"
)

// HTTP layout of a served Cloud (all on one loopback listener):
//
//	POST   /api/v1/<op>                          engine operations (JSON in, {"result": …} or {"error": …} out)
//	GET    /registry/instances/<vm cid>/settings  BOSH Registry (basic auth)
//	PUT    /registry/instances/<vm cid>/settings
//	DELETE /registry/instances/<vm cid>/settings
//	GET    /metadata/<vm cid>/user-data           metadata service
//	GET    /oracle/state                          oracle: the whole state
//	GET    /oracle/history?since=&op=&target=&request_id=&limit=
//	GET    /faults                                fault rules with counters
//	POST   /faults                                add rules (JSON Rule, or text/plain one per line)
//	DELETE /faults                                remove every rule
//	DELETE /faults/<id>                           remove one rule
//	POST   /faults/<id>/release                   release a pause rule
//
// The caller's request_id travels in the X-Request-Id header.
const (
	apiPrefix       = "/api/v1/"
	requestIDHeader = "X-Request-Id"
)

// cidReq is the body of operations on one object.
type cidReq struct {
	CID      string         `json:"cid"`
	Metadata cpiv2.Metadata `json:"metadata,omitempty"`
	SizeMiB  int            `json:"size_mib,omitempty"`
}

// pairReq is the body of attach_disk and detach_disk.
type pairReq struct {
	VMCID   string `json:"vm_cid"`
	DiskCID string `json:"disk_cid"`
}

func vmCID(s string) cpiv2.VMCID             { c, _ := cpiv2.NewVMCID(s); return c }
func diskCID(s string) cpiv2.DiskCID         { c, _ := cpiv2.NewDiskCID(s); return c }
func stemcellCID(s string) cpiv2.StemcellCID { c, _ := cpiv2.NewStemcellCID(s); return c }
func snapshotCID(s string) cpiv2.SnapshotCID { c, _ := cpiv2.NewSnapshotCID(s); return c }

type apiFunc func(ctx context.Context, body []byte) (any, error)

func decode[T any](body []byte) (T, error) {
	var v T
	if err := strictjson.Unmarshal(body, &v); err != nil {
		return v, invalid("request body: %v", err)
	}
	return v, nil
}

func (c *Cloud) apiTable() map[Op]apiFunc {
	one := func(fn func(ctx context.Context, r cidReq) (any, error)) apiFunc {
		return func(ctx context.Context, body []byte) (any, error) {
			r, err := decode[cidReq](body)
			if err != nil {
				return nil, err
			}
			return fn(ctx, r)
		}
	}
	pair := func(fn func(ctx context.Context, r pairReq) (any, error)) apiFunc {
		return func(ctx context.Context, body []byte) (any, error) {
			r, err := decode[pairReq](body)
			if err != nil {
				return nil, err
			}
			return fn(ctx, r)
		}
	}
	return map[Op]apiFunc{
		OpCreateStemcell: func(ctx context.Context, body []byte) (any, error) {
			s, err := decode[StemcellSpec](body)
			if err != nil {
				return nil, err
			}
			return c.CreateStemcell(ctx, s)
		},
		OpDeleteStemcell: one(func(ctx context.Context, r cidReq) (any, error) {
			return nil, c.DeleteStemcell(ctx, stemcellCID(r.CID))
		}),
		OpGetStemcell: one(func(ctx context.Context, r cidReq) (any, error) { return c.Stemcell(ctx, stemcellCID(r.CID)) }),
		OpCreateVM: func(ctx context.Context, body []byte) (any, error) {
			s, err := decode[VMSpec](body)
			if err != nil {
				return nil, err
			}
			return c.CreateVM(ctx, s)
		},
		OpDeleteVM:   one(func(ctx context.Context, r cidReq) (any, error) { return nil, c.DeleteVM(ctx, vmCID(r.CID)) }),
		OpGetVM:      one(func(ctx context.Context, r cidReq) (any, error) { return c.VM(ctx, vmCID(r.CID)) }),
		OpRebootVM:   one(func(ctx context.Context, r cidReq) (any, error) { return nil, c.RebootVM(ctx, vmCID(r.CID)) }),
		OpGetDisks:   one(func(ctx context.Context, r cidReq) (any, error) { return c.VMDisks(ctx, vmCID(r.CID)) }),
		OpGetDisk:    one(func(ctx context.Context, r cidReq) (any, error) { return c.Disk(ctx, diskCID(r.CID)) }),
		OpDeleteDisk: one(func(ctx context.Context, r cidReq) (any, error) { return nil, c.DeleteDisk(ctx, diskCID(r.CID)) }),
		OpSetVMMetadata: one(func(ctx context.Context, r cidReq) (any, error) {
			return nil, c.SetVMMetadata(ctx, vmCID(r.CID), r.Metadata)
		}),
		OpCreateDisk: func(ctx context.Context, body []byte) (any, error) {
			s, err := decode[DiskSpec](body)
			if err != nil {
				return nil, err
			}
			return c.CreateDisk(ctx, s)
		},
		OpAttachDisk: pair(func(ctx context.Context, r pairReq) (any, error) {
			return c.AttachDisk(ctx, vmCID(r.VMCID), diskCID(r.DiskCID))
		}),
		OpDetachDisk: pair(func(ctx context.Context, r pairReq) (any, error) {
			return nil, c.DetachDisk(ctx, vmCID(r.VMCID), diskCID(r.DiskCID))
		}),
		OpSetDiskMetadata: one(func(ctx context.Context, r cidReq) (any, error) {
			return nil, c.SetDiskMetadata(ctx, diskCID(r.CID), r.Metadata)
		}),
		OpResizeDisk: one(func(ctx context.Context, r cidReq) (any, error) {
			return nil, c.ResizeDisk(ctx, diskCID(r.CID), r.SizeMiB)
		}),
		OpUpdateDisk: func(ctx context.Context, body []byte) (any, error) {
			u, err := decode[DiskUpdate](body)
			if err != nil {
				return nil, err
			}
			return nil, c.UpdateDisk(ctx, u)
		},
		OpSnapshotDisk: one(func(ctx context.Context, r cidReq) (any, error) {
			return c.SnapshotDisk(ctx, diskCID(r.CID), r.Metadata)
		}),
		OpDeleteSnapshot: one(func(ctx context.Context, r cidReq) (any, error) {
			return nil, c.DeleteSnapshot(ctx, snapshotCID(r.CID))
		}),
	}
}

// Handler serves the HTTP API, registry, metadata service, fault rules and
// oracle of this Cloud (see the layout above).
func (c *Cloud) Handler() http.Handler {
	mux := http.NewServeMux()
	table := c.apiTable()
	mux.HandleFunc("POST /api/v1/{op}", func(w http.ResponseWriter, r *http.Request) {
		fn, ok := table[Op(r.PathValue("op"))]
		if !ok {
			writeErr(w, invalid("unknown operation %q", r.PathValue("op")))
			return
		}
		body, err := readBody(w, r)
		if err != nil {
			writeErr(w, err)
			return
		}
		res, err := fn(ctxFrom(r), body)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": res})
	})

	reg := func(fn func(w http.ResponseWriter, r *http.Request, cid string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !c.registryAuthOK(r) {
				w.Header().Set("WWW-Authenticate", `Basic realm="BOSH Registry"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"status": "access_denied"})
				return
			}
			fn(w, r, r.PathValue("cid"))
		}
	}
	mux.HandleFunc("GET /registry/instances/{cid}/settings", reg(func(w http.ResponseWriter, r *http.Request, cid string) {
		s, err := c.GetSettings(ctxFrom(r), cid)
		if err != nil {
			writeRegistryErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"settings": string(s), "status": "ok"})
	}))
	mux.HandleFunc("PUT /registry/instances/{cid}/settings", reg(func(w http.ResponseWriter, r *http.Request, cid string) {
		body, err := readBody(w, r)
		if err == nil {
			err = c.PutSettings(ctxFrom(r), cid, body)
		}
		if err != nil {
			writeRegistryErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	mux.HandleFunc("DELETE /registry/instances/{cid}/settings", reg(func(w http.ResponseWriter, r *http.Request, cid string) {
		if err := c.DeleteSettings(ctxFrom(r), cid); err != nil {
			writeRegistryErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	mux.HandleFunc("GET /metadata/{cid}/user-data", func(w http.ResponseWriter, r *http.Request) {
		ud, err := c.UserData(ctxFrom(r), r.PathValue("cid"))
		if err != nil {
			writeErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(ud)
	})

	mux.HandleFunc("GET /oracle/state", func(w http.ResponseWriter, r *http.Request) {
		s, err := c.State(r.Context())
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": s})
	})
	mux.HandleFunc("GET /oracle/history", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f := HistoryFilter{Op: Op(q.Get("op")), Target: q.Get("target"), RequestID: q.Get("request_id")}
		limit := 0
		var err error
		if s := q.Get("since"); s != "" {
			if f.Since, err = strconv.ParseInt(s, 10, 64); err != nil {
				writeErr(w, invalid("since=%q: %v", s, err))
				return
			}
		}
		if s := q.Get("limit"); s != "" {
			if limit, err = strconv.Atoi(s); err != nil {
				writeErr(w, invalid("limit=%q: %v", s, err))
				return
			}
		}
		h, err := c.History(r.Context(), f, limit)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": h})
	})

	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, r *http.Request) {
		l, _ := c.Faults(r.Context())
		writeJSON(w, http.StatusOK, map[string]any{"result": l})
	})
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(w, r)
		if err != nil {
			writeErr(w, err)
			return
		}
		var rules []Rule
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			var one Rule
			if err := strictjson.Unmarshal(body, &one); err != nil {
				writeErr(w, invalid("fault rule JSON: %v", err))
				return
			}
			rules = []Rule{one}
		} else if rules, err = ParseRules(string(body)); err != nil {
			writeErr(w, invalid("%v", err))
			return
		}
		added := make([]Rule, 0, len(rules))
		for _, rule := range rules {
			a, err := c.AddFault(r.Context(), rule)
			if err != nil {
				writeErr(w, err)
				return
			}
			added = append(added, a)
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": added})
	})
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, r *http.Request) {
		_ = c.ClearFaults(r.Context())
		writeJSON(w, http.StatusOK, map[string]any{"result": nil})
	})
	mux.HandleFunc("DELETE /faults/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := c.RemoveFault(r.Context(), r.PathValue("id")); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": nil})
	})
	mux.HandleFunc("POST /faults/{id}/release", func(w http.ResponseWriter, r *http.Request) {
		if err := c.ReleaseFault(r.Context(), r.PathValue("id")); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": nil})
	})
	return mux
}

// readBody reads a request body of at most MaxRequestBytes that is valid
// UTF-8. Too long is ErrTooLarge (HTTP 413, naming the limit); invalid
// UTF-8 is ErrInvalid, rather than text silently turned into U+FFFD.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge("request body exceeds fakeiaas's limit of %d bytes (MaxRequestBytes)", MaxRequestBytes)
	}
	if err != nil {
		return nil, invalid("reading request body: %v", err)
	}
	if !utf8.Valid(body) {
		return nil, invalid("request body is not valid UTF-8")
	}
	return body, nil
}

func ctxFrom(r *http.Request) context.Context {
	ctx := r.Context()
	if id := r.Header.Get(requestIDHeader); id != "" {
		ctx = WithRequestID(ctx, id)
	}
	return ctx
}

func (c *Cloud) registryAuthOK(r *http.Request) bool {
	if c.regUser == "" {
		return true
	}
	u, p, ok := r.BasicAuth()
	return ok && subtle.ConstantTimeCompare([]byte(u), []byte(c.regUser)) == 1 &&
		subtle.ConstantTimeCompare([]byte(p), []byte(c.regPass)) == 1
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func statusOf(code Code) int {
	switch code {
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict, CodeExists:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusUnprocessableEntity
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// loseResponse drops the connection without answering.
func loseResponse(w http.ResponseWriter) bool {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

func writeErr(w http.ResponseWriter, err error) {
	e := asError("http", err)
	if e.Code == CodeResponseLost && loseResponse(w) {
		return
	}
	if e.Code == CodeRateLimited && e.RetryAfter > 0 {
		secs := int((e.RetryAfter + 999_999_999) / 1_000_000_000)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	writeJSON(w, statusOf(e.Code), map[string]any{"error": toWire(e)})
}

func writeRegistryErr(w http.ResponseWriter, err error) {
	e := asError("registry", err)
	if e.Code == CodeResponseLost && loseResponse(w) {
		return
	}
	if errors.Is(e, ErrNotFound) {
		writeJSON(w, http.StatusNotFound, map[string]string{"status": "not_found"})
		return
	}
	writeJSON(w, statusOf(e.Code), map[string]any{"status": "error", "error": toWire(e)})
}

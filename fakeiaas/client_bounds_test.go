package fakeiaas_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
	"github.com/cpilab/cpilab/internal/httpread/httpreadtest"
)

// The fakeiaas client and the reference CPI's registry client stop at
// their read cap against an endless or oversize answer, with an error
// naming the endpoint and the cap.
func TestClientsCapHostileAnswers(t *testing.T) {
	for name, h := range map[string]http.Handler{
		"endless":  httpreadtest.Endless(http.StatusOK),
		"oversize": httpreadtest.Oversize(http.StatusOK, fakeiaas.MaxAnswerBytes+1),
	} {
		srv := httptest.NewServer(h)
		ctx := context.Background()
		cid, err := cpiv2.NewDiskCID("d-1")
		if err != nil {
			t.Fatal(err)
		}
		_, err = fakeiaas.NewClient(srv.URL).Disk(ctx, cid)
		if err == nil || !strings.Contains(err.Error(), "16 MiB cap") || !strings.Contains(err.Error(), "POST /api/v1/get_disk") {
			t.Errorf("%s: Client.Disk: %v; want the endpoint and the 16 MiB cap named", name, err)
		}
		_, err = refcpi.NewHTTPRegistry(srv.URL, "", "").GetSettings(ctx, "vm-1")
		if err == nil || !strings.Contains(err.Error(), "16 MiB cap") || !strings.Contains(err.Error(), "/instances/vm-1/settings") {
			t.Errorf("%s: registry GetSettings: %v; want the endpoint and the 16 MiB cap named", name, err)
		}
		srv.Close()
	}
}

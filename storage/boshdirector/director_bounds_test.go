package boshdirector_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/internal/httpread/httpreadtest"
	"github.com/cpilab/cpilab/storage/boshdirector"
)

// The storage controller's Director adapter reads through director.Client:
// an endless or oversize answer ends at the client's cap, naming the
// endpoint.
func TestAdapterCapsHostileAnswers(t *testing.T) {
	for name, h := range map[string]http.Handler{
		"endless":  httpreadtest.Endless(http.StatusOK),
		"oversize": httpreadtest.Oversize(http.StatusOK, 1<<20+1),
	} {
		srv := httptest.NewServer(h)
		c, err := director.NewClient(director.ClientConfig{URL: srv.URL, Token: "t", MaxAnswerBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = boshdirector.NewDirector(c).Disk(context.Background(), "vol-1")
		if err == nil || !strings.Contains(err.Error(), "GET /dynamic_disks/vol-1") || !strings.Contains(err.Error(), "1 MiB cap") {
			t.Errorf("%s: Disk: %v; want the endpoint and the cap named", name, err)
		}
		srv.CloseClientConnections()
		srv.Close()
	}
}

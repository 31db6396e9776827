package agent_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/internal/httpread/httpreadtest"
)

// The agent's settings fetcher stops at its 16 MiB cap against an endless
// or oversize answer from the registry or the metadata service.
func TestHTTPFetcherCapsHostileAnswers(t *testing.T) {
	for name, h := range map[string]http.Handler{
		"endless":  httpreadtest.Endless(http.StatusOK),
		"oversize": httpreadtest.Oversize(http.StatusOK, 16<<20+1),
	} {
		srv := httptest.NewServer(h)
		_, err := agent.HTTPFetcher(nil).Get(srv.URL+"/instances/vm-1/settings", nil)
		if err == nil || !strings.Contains(err.Error(), "16 MiB cap") || !strings.Contains(err.Error(), "/instances/vm-1/settings") {
			t.Errorf("%s: %v; want the endpoint and the 16 MiB cap named", name, err)
		}
		srv.Close()
	}
}

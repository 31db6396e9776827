// Command fakeiaas-cpi is the reference CPI executable: a BOSH CPI on top of
// a fakeiaas server.
//
//	fakeiaas-cpi -configPath cpi.json < request.json > response.json
//
// It reads one CPI request on stdin, answers one response on stdout, logs
// to stderr, and always exits 0, as a CPI must (the bosh CLI fails a call
// on a non-zero exit). cpi.json is described in docs/seams.md;
// debug.cpi.api_version caps the api_version it speaks.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
)

func main() {
	fs := flag.NewFlagSet("fakeiaas-cpi", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	configPath := fs.String("configPath", "", "path to cpi.json (required)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		fail(err)
	}
	if *configPath == "" {
		fail(fmt.Errorf("-configPath is required"))
	}
	fc, err := refcpi.LoadFileConfig(*configPath)
	if err != nil {
		fail(err)
	}
	cfg := fc.Config()
	cfg.Log = os.Stderr
	cpi := refcpi.New(cfg, fakeiaas.NewClient(fc.Cloud.Properties.Fakeiaas.URL))
	cpiv2.Main(cpi, cpiv2.DispatcherConfig{MaxAPIVersion: cpi.MaxAPIVersion(), Log: os.Stderr})
}

// fail answers the request with a CpiError, as a CPI must still answer on
// stdout and exit 0 when it cannot even read its configuration.
func fail(err error) {
	fmt.Fprintf(os.Stderr, "fakeiaas-cpi: %v\n", err)
	resp := cpiv2.Response{Error: cpiv2.NewError(cpiv2.TypeCpiError, "fakeiaas-cpi: %v", err)}
	out, _ := resp.Encode()
	_, _ = os.Stdout.Write(out)
	os.Exit(0)
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/fakeiaas"
)

func TestFaultsCommandRoundTrip(t *testing.T) {
	srv, err := fakeiaas.Serve(fakeiaas.ServeConfig{DataDir: t.TempDir(), Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"fakeiaas", "faults"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	rule := "id=r1 op=attach_disk nth=2 effect=error type=DiskNotFound ok_to_retry=true"
	if code, out, errs := cli("add", "--url", srv.URL(), rule); code != 0 || !strings.Contains(out, "id=r1 op=attach_disk") {
		t.Fatalf("add: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := cli("add", "--url", srv.URL(), "op=bogus effect=error"); code != exitUsage || !strings.Contains(errs, `unknown op "bogus"`) {
		t.Fatalf("a bad rule: exit %d, stderr %q; want 2 (a usage error) naming the unknown op", code, errs)
	}
	code, out, _ := cli("list", "--url", srv.URL())
	if code != 0 || !strings.Contains(out, "Bosh::Clouds::DiskNotFound") || strings.Contains(out, "bogus") {
		t.Fatalf("list: exit %d, %q", code, out)
	}
	if code, _, errs := cli("rm", "--url", srv.URL(), "r1"); code != 0 {
		t.Fatalf("rm: exit %d, %q", code, errs)
	}
	if _, out, _ := cli("list", "--url", srv.URL()); !strings.Contains(out, "no fault rules") {
		t.Fatalf("after rm, list says %q", out)
	}
	if code, _, errs := cli("list"); code != exitUsage || !strings.Contains(errs, "--url is required") {
		t.Fatalf("no --url: exit %d, %q", code, errs)
	}
}

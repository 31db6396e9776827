package director_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/suites/dynamicdisks/upstreamfixture"
)

// The client drives a director that answers exactly as upstream's does
// (302 with an empty body and only a Location, task results only for
// provide and create, upstream's list and instance shapes and error
// bodies).
func TestClientAgainstUpstreamShapedDirector(t *testing.T) {
	fx := upstreamfixture.New(upstreamfixture.Config{Tokens: map[string][]string{
		"admin": {"bosh.admin"}, "reader": {"bosh.read"}, "lister": {director.ScopeDisksList}}})
	defer fx.Close()
	srv := httptest.NewServer(fx.Handler())
	defer srv.Close()
	client := func(tok string) *director.Client {
		c, err := director.NewClient(director.ClientConfig{URL: srv.URL, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	c := client("admin")
	insts, err := c.Instances(ctx, "fixture")
	if err != nil || len(insts) != 2 || insts[0].VMCID == "" || insts[0].Group != "worker" || insts[0].AZ != "z1" {
		t.Fatalf("Instances = %+v, %v", insts, err)
	}
	a, b := insts[0], insts[1]
	cid, err := c.Provide(ctx, director.ProvideRequest{InstanceID: a.ID, DiskName: "p", DiskPoolName: "dynamic", DiskSize: 8})
	if err != nil || cid == "" {
		t.Fatalf("Provide = %q, %v", cid, err)
	}
	list, err := c.DynamicDisks(ctx)
	if err != nil || len(list) != 1 || list[0].CID != cid || list[0].InstanceName() != "worker/"+a.ID || list[0].SizeMiB != 8 {
		t.Fatalf("DynamicDisks = %+v, %v", list, err)
	}
	var te *director.TaskFailedError
	if _, err := c.Provide(ctx, director.ProvideRequest{InstanceID: b.ID, DiskName: "p", DiskPoolName: "dynamic", DiskSize: 8}); !errors.As(err, &te) ||
		!strings.HasPrefix(te.Task.Result, "disk is attached to a different vm") {
		t.Fatalf("Provide elsewhere: %v; want upstream's task error", err)
	}
	if err := c.DetachDynamicDisk(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if msg, err := c.AttachDynamicDisk(ctx, "p", b.ID, map[string]any{"k": "v"}); err != nil || !strings.Contains(msg, "attached disk `p` to vm") {
		t.Fatalf("Attach = %q, %v", msg, err)
	}
	made, err := c.CreateDynamicDisk(ctx, director.CreateDiskRequest{Deployment: "fixture", AZ: "z1", DiskName: "c", DiskPoolName: "dynamic", DiskSize: 1})
	if err != nil || made == "" || made == cid {
		t.Fatalf("Create = %q, %v", made, err)
	}
	for _, name := range []string{"p", "c", "never"} {
		if err := c.DeleteDynamicDisk(ctx, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	// Error answers: the Director's codes.
	_, err = client("reader").DynamicDisks(ctx)
	var ae *director.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Code != director.CodeUnauthorized ||
		!strings.HasPrefix(ae.Description, "Require one of the scopes: bosh.admin") {
		t.Fatalf("bosh.read listing: %v; want 401 code 600000", err)
	}
	if _, err := client("lister").DynamicDisks(ctx); err != nil {
		t.Fatalf("bosh.dynamic-disks.list listing: %v", err)
	}
	if _, err := client("lister").Task(ctx, 1); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Fatalf("a disk-only token reading a task: %v; want 401 (upstream)", err)
	}
	_, err = c.Provide(ctx, director.ProvideRequest{InstanceID: a.ID, DiskName: "z", DiskPoolName: "dynamic"})
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != director.CodeValidationViolatedMin {
		t.Fatalf("disk_size 0: %v; want 400 code 40002", err)
	}
	if calls := fx.Calls(); len(calls) == 0 || calls[0].Method != "create_disk" {
		t.Fatalf("the fixture saw %+v", calls)
	}
}

package launch_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/launch"
)

// Run serves a working director: embedded NATS, SQLite, fakeiaas with the
// reference CPI and agents; a client deploys and provides a disk.
func TestRunServesADirector(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan launch.Info, 1)
	done := make(chan error, 1)
	go func() {
		done <- launch.Run(ctx, launch.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Out: io.Discard,
			Ready: func(i launch.Info) { ready <- i }})
	}()
	var info launch.Info
	select {
	case info = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	c, err := director.NewClient(director.ClientConfig{URL: info.URL, CACertPEM: info.CACertPEM,
		Username: info.Users[0].Name, Password: info.Users[0].Password})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Login(ctx); err != nil {
		t.Fatal(err)
	}
	fx := "../../fixtures/director"
	loc, _ := filepath.Abs(filepath.Join(fx, "stemcell-v2"))
	if err := c.UploadStemcell(ctx, loc); err != nil {
		t.Fatal(err)
	}
	cc, m := readFile(t, filepath.Join(fx, "cloud-config.yml")), readFile(t, filepath.Join(fx, "manifest.yml"))
	if err := c.UpdateCloudConfig(ctx, cc); err != nil {
		t.Fatal(err)
	}
	if err := c.Deploy(ctx, m); err != nil {
		t.Fatal(err)
	}
	insts, err := c.Instances(ctx, "workers")
	if err != nil || len(insts) != 2 {
		t.Fatalf("instances %v, %v", insts, err)
	}
	if _, err := c.Provide(ctx, director.ProvideRequest{DiskSize: 4, DiskName: "d", DiskPoolName: "small", InstanceID: insts[0].ID}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

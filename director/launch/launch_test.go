package launch_test

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// The next steps Run prints run as printed in a shell (curl, sed, grep):
// they upload the example cloud config and stemcell, deploy, and provide a
// dynamic disk, which the last command lists.
func TestRunPrintsRunnableNextSteps(t *testing.T) {
	for _, tool := range []string{"sh", "curl", "sed", "grep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("not checked: %s is not installed", tool)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan launch.Info, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		done <- launch.Run(ctx, launch.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Out: &out,
			Ready: func(i launch.Info) { ready <- i }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	}()
	text := out.String()
	_, steps, ok := strings.Cut(text, "Next steps:")
	if !ok {
		t.Fatalf("no next steps in:\n%s", text)
	}
	var script []string
	for _, line := range strings.Split(steps, "\n") {
		if cmd, ok := strings.CutPrefix(line, "  "); ok {
			script = append(script, cmd)
		}
	}
	if len(script) < 7 {
		t.Fatalf("%d commands in the next steps:\n%s", len(script), text)
	}
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	cmd := exec.CommandContext(sctx, "sh", "-c", "set -e\n"+strings.Join(script, "\n"))
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the next steps failed: %v\n%s\nscript:\n%s", err, res, strings.Join(script, "\n"))
	}
	for _, want := range []string{`"state":"done"`, `"name":"data"`, `"instance":"worker/`} {
		if !strings.Contains(string(res), want) {
			t.Errorf("the next steps' output lacks %s:\n%s", want, res)
		}
	}
	if strings.Contains(string(res), `"state":"error"`) {
		t.Errorf("a task failed:\n%s", res)
	}
}

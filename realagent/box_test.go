package realagent

import (
	"errors"
	"testing"
)

// startBox starts a box for a test, or skips saying why it cannot run.
func startBox(t *testing.T, o Options) *Box {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not starting the real-agent box (a Docker daemon and the upstream agent)")
	}
	o.Log = t.Logf
	b, err := Start(o)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// BenchmarkBoxStart: a later start of the box (the root filesystem cached):
// a private dockerd, the image imported, the container run, the upstream
// agent answering ping; then a restart (a VM reboot). It reports seconds
// per start and per restart.
func BenchmarkBoxStart(b *testing.B) {
	var start, restart float64
	for i := 0; i < b.N; i++ {
		box, err := Start(Options{AgentID: "agent-bench"})
		if errors.Is(err, ErrUnavailable) {
			b.Skip(err)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := box.Restart(); err != nil {
			box.Close()
			b.Fatal(err)
		}
		start += box.Figures["start"].Seconds()
		restart += box.Figures["restart"].Seconds()
		b.Logf("start %.1f s (dockerd %.1f, image %.1f, container created and started %.1f, agent answering %.1f), restart %.1f s", box.Figures["start"].Seconds(),
			box.Figures["dockerd"].Seconds(), box.Figures["image"].Seconds(), box.Figures["run"].Seconds(), (box.Figures["agent"] - box.Figures["run"]).Seconds(), box.Figures["restart"].Seconds())
		box.Close()
	}
	b.ReportMetric(start/float64(b.N), "s/start")
	b.ReportMetric(restart/float64(b.N), "s/restart")
}

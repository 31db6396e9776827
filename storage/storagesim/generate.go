package storagesim

import (
	"math/rand/v2"
	"time"

	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/storage"
)

// Generate draws a Config from seed: a policy, a provider model, a workload
// and a fault schedule. Profile is left for the caller to set.
func Generate(seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	request := int64(1+r.IntN(20)) << 10 // 1–20 GiB
	limit := request * int64(2+r.IntN(30))
	windows := []string{"0 3 * * *", "30 1 * * *", "0 2 * * 0", "0 */6 * * *", storage.AlwaysOpen}
	p := storage.Policy{
		RequestMiB:   request,
		LimitMiB:     limit,
		TargetBuffer: 10 + r.IntN(31),
		Window: storage.Window{
			Schedule: windows[r.IntN(len(windows))],
			Duration: time.Duration(1+r.IntN(4)) * time.Hour,
			TimeZone: []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata"}[r.IntN(4)],
		},
		Emergency: storage.Emergency{
			CriticalThreshold:      85 + r.IntN(14),
			CriticalMinimumFreeMiB: int64(256 + r.IntN(1024)),
			ExceedLimit:            r.IntN(5) == 0,
			MaxActionsPerDay:       2 + r.IntN(5),
			ReservedForEmergency:   1,
		},
		MinStepMiB:  int64(512 + r.IntN(2048)),
		AllowShrink: r.IntN(2) == 0,
	}
	prov := Provider{Latency: time.Duration(1+r.IntN(30)) * time.Minute}
	switch r.IntN(3) {
	case 0:
		prov.MinInterval = 6 * time.Hour
	case 1:
		prov.MaxPer24h = 4
	}
	if r.IntN(4) == 0 {
		prov.MaxSizeMiB = limit * 3 / 4
	}
	size := float64(request)
	wl := Workload{Period: time.Duration(2+r.IntN(46)) * time.Hour}
	switch r.IntN(4) {
	case 0:
		wl.Kind = Steady
		wl.RateMiBPerHour = size * (0.001 + r.Float64()*0.02)
	case 1:
		wl.Kind = Bursty
		wl.RateMiBPerHour = size * r.Float64() * 0.005
		wl.BurstMiB = size * (0.05 + r.Float64()*0.3)
	case 2:
		wl.Kind = SpikeDelete
		wl.RateMiBPerHour = size * r.Float64() * 0.002
		wl.BurstMiB = size * (0.1 + r.Float64()*0.5)
	case 3:
		wl.Kind = Oscillating
		wl.RateMiBPerHour = size * r.Float64() * 0.002
		wl.BurstMiB = size * (0.05 + r.Float64()*0.3)
	}
	var fs []Fault
	kinds := faults.StorageKinds
	for range r.IntN(6) {
		fs = append(fs, Fault{
			Kind: kinds[r.IntN(len(kinds))],
			At:   time.Duration(r.Int64N(int64(27 * 24 * time.Hour))),
			For:  time.Duration(1+r.IntN(240)) * time.Minute,
		})
	}
	return Config{Seed: seed, Policy: p, Provider: prov, Workload: wl, Faults: fs, InitialUsedMiB: size * r.Float64() * 0.7}
}

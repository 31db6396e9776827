package simulator

import (
	"strings"
	"testing"
)

// Every device style runs clean: the stemcell's resolver finds each
// attached disk from the hint the CPI returns, and the agent's link reaches
// the disk's file (agent-links-match-iaas follows it).
func TestEveryDeviceStyleLinksTheDisk(t *testing.T) {
	for _, d := range DeviceStyles {
		t.Run(strings.ReplaceAll(d.String(), "/", "-"), func(t *testing.T) {
			t.Parallel()
			if got, err := ParseDevices(d.String()); err != nil || got != d {
				t.Fatalf("ParseDevices(%q) = %v, %v", d, got, err)
			}
			o := Simulate(SimConfig{RunConfig: RunConfig{Seed: 3, Steps: 40, Workload: WorkloadConfig{Shape: ShapeLight}}, Devices: d})
			if o.Err != nil {
				t.Fatalf("devices %s: %v\n%s", d, o.Err, strings.Join(o.Log, "\n"))
			}
			if o.Devices != d {
				t.Fatalf("the run reports devices %s, want %s", o.Devices, d)
			}
			ok := 0
			for _, l := range o.Log {
				if strings.Contains(l, "provide") && strings.HasSuffix(l, ": ok") {
					ok++
				}
			}
			if ok == 0 {
				t.Fatalf("no provide succeeded: the style was not exercised\n%s", strings.Join(o.Log, "\n"))
			}
		})
	}
	if _, err := ParseDevices("virtio/lun/sd"); err == nil {
		t.Error("ParseDevices accepted a pair no IaaS ships")
	}
}

// A sweep's seeds draw every style, and a seed always the same one.
func TestSeedsDrawEveryDeviceStyle(t *testing.T) {
	seen := map[Devices]bool{}
	for s := Seed(1); s <= 200; s++ {
		d := SeedConfig(RunConfig{Seed: s}).Devices
		if again := SeedConfig(RunConfig{Seed: s}).Devices; again != d {
			t.Fatalf("seed %s drew %s, then %s", s, d, again)
		}
		seen[d] = true
	}
	if len(seen) != len(DeviceStyles) {
		t.Fatalf("200 seeds drew %d of the %d styles: %v", len(seen), len(DeviceStyles), seen)
	}
}

// A trace file names its devices, so that replaying it needs no seed's draw.
func TestTraceFileNamesItsDevices(t *testing.T) {
	d := Devices{Resolver: "scsi", Hint: "lun", Prefix: "sd"}
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1, Steps: 2}, Devices: d, Ops: controlOps(t, "c0 provide disk=a vm=0"), Scripted: true}
	text, err := TraceFile(cfg, "devices")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, " devices=scsi/lun/sd ") {
		t.Fatalf("the trace file does not name its devices:\n%s", text)
	}
}

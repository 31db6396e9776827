package embedtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestEmbedded(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	if suiteConfig.LabelFilter == "" {
		// Keep this demonstration short: one context and one row.
		suiteConfig.LabelFilter = "row:director-current.api3 || row:current.c3.s2 || my-own"
	}
	RunSpecs(t, "my CPI project", suiteConfig, reporterConfig)
}

// cfg is filled in by BeforeSuite; the registered specs read it when they
// run.
var cfg cpisuite.Config

var tb *testbed.Testbed

var _ = BeforeSuite(func() {
	bin := filepath.Join(GinkgoT().TempDir(), "fakeiaas-cpi")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/cpilab/cpilab/cmd/fakeiaas-cpi").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	tb, err = testbed.Start(testbed.Config{})
	Expect(err).NotTo(HaveOccurred())
	c, err := tb.SuiteConfig([]string{bin})
	Expect(err).NotTo(HaveOccurred())
	c.CPI.HonoursAPIVersionCap = true
	c.RunID = cfg.RunID // keep the run ID Register chose
	cfg = c
})

var _ = AfterSuite(func() {
	if tb != nil {
		Expect(tb.Close()).To(Succeed())
	}
})

var _ = Describe("my CPI project", func() {
	It("has its own specs", Label("my-own"), func() {
		Expect(os.Getenv("PATH")).NotTo(BeEmpty())
	})
	Context("cpilab certification", func() {
		cpisuite.Register(&cfg)
	})
})

package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/testbed"
)

// --cloud: which face of the embedded fake cloud the CPI speaks to.
const (
	// cloudFakeiaas is fakeiaas's own API (the reference CPI's), the default.
	cloudFakeiaas = "fakeiaas"
	// cloudDocker is the Docker Engine API face, for the upstream BOSH
	// Docker CPI (docs/docker.md).
	cloudDocker = "docker"
)

var cloudChoices = []string{cloudFakeiaas, cloudDocker}

// dockerDefectEnv breaks the Docker face on purpose (dockerapi.Defect),
// for the test that shows such a cloud is caught. It is read from the
// environment, not a flag: no user certifies against a broken cloud, and
// the worker processes of a run inherit it.
const dockerDefectEnv = "CPILAB_DOCKER_DEFECT"

func registerCertifyCloud(fs *flag.FlagSet, f *certifyFlags) {
	fs.StringVar(&f.cloud, "cloud", cloudFakeiaas, "`FACE` of the embedded fake cloud the CPI speaks to: "+strings.Join(cloudChoices, " or ")+
		" (docker: the Docker Engine API on a unix socket, for the upstream BOSH Docker CPI; docs/docker.md)")
}

// checkCloud refuses an unknown --cloud, and --cloud docker with --config
// (a real cloud has no embedded face).
func (f *certifyFlags) checkCloud(fs *flag.FlagSet) error {
	switch f.cloud {
	case cloudFakeiaas, cloudDocker:
	default:
		return usageError(fs, "--cloud %q: want one of %s", f.cloud, strings.Join(cloudChoices, ", "))
	}
	if f.cloud == cloudDocker && f.config != "" {
		return usageError(fs, "--cloud docker and --config exclude each other: --cloud picks a face of the embedded cloud")
	}
	if d := dockerapi.Defect(os.Getenv(dockerDefectEnv)); d != dockerapi.DefectNone && d != dockerapi.DefectUnboundOnRecreate {
		return usageError(fs, "%s=%q: want %q or nothing", dockerDefectEnv, d, dockerapi.DefectUnboundOnRecreate)
	}
	if f.cloud == cloudDocker && f.cpi == "" && !f.list {
		return usageError(fs, "--cloud docker needs --cpi PATH: the BOSH Docker CPI binary (docs/docker.md says how to build it)")
	}
	return nil
}

// startCloud starts the embedded cloud for --cloud and returns the suites'
// config for the CPI command cpi.
func (f *certifyFlags) startCloud(cpi string) (*testbed.Testbed, suites.Config, error) {
	tcfg := testbed.Config{}
	if f.cloud == cloudDocker {
		tcfg.Docker = true
		tcfg.DockerDefect = dockerapi.Defect(os.Getenv(dockerDefectEnv))
	}
	tb, err := testbed.Start(tcfg)
	if err != nil {
		return nil, suites.Config{}, err
	}
	var cfg suites.Config
	if f.cloud == cloudDocker {
		cfg, err = tb.DockerSuiteConfig([]string{cpi})
	} else {
		cfg, err = tb.SuiteConfig([]string{cpi})
	}
	if err != nil {
		tb.Close()
		return nil, suites.Config{}, err
	}
	return tb, cfg, nil
}

// cloudNote describes the embedded cloud for the run's notes.
func (f *certifyFlags) cloudNote(tb *testbed.Testbed) string {
	n := fmt.Sprintf("embedded fakeiaas at %s, NATS at %s, SFTP at %s", tb.URL(), tb.MbusURL(), tb.SSH.Addr())
	if tb.Docker != nil {
		n += fmt.Sprintf("; Docker Engine API face at %s (the CPI's VMs are containers, disks volumes, stemcells images)", tb.Docker.Host())
	}
	return n
}

// rerunCloud is --cloud in a rerun command.
func rerunCloud(f certifyFlags) []string {
	if f.cloud == "" || f.cloud == cloudFakeiaas {
		return nil
	}
	return []string{"--cloud", f.cloud}
}

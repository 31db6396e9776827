package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
	"github.com/cpilab/cpilab/suites/cpisuite"
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
	fs.StringVar(&f.dockerHost, "docker-host", "", "with --cloud docker: certify against the real Docker daemon at `unix:///PATH` instead of the face; the oracle reads the daemon through its API, and the agent, SFTP and fault-injection specs are not checked (docs/docker.md)")
	fs.StringVar(&f.dockerAPI, "docker-api-version", "", "with --cloud docker: the highest Docker API `VERSION` (e.g. 1.41) the CPI is configured to speak; the face then serves as a daemon of that version (default: 1.44, or the real daemon's maximum when lower)")
}

var dockerAPIVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)

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
	if f.dockerHost != "" || f.dockerAPI != "" {
		if f.cloud != cloudDocker {
			return usageError(fs, "--docker-host and --docker-api-version need --cloud docker")
		}
		if f.dockerHost != "" && !strings.HasPrefix(f.dockerHost, "unix:///") {
			return usageError(fs, "--docker-host %q: want unix:///PATH, a Docker daemon's socket", f.dockerHost)
		}
		if f.dockerAPI != "" && !dockerAPIVersionRE.MatchString(f.dockerAPI) {
			return usageError(fs, "--docker-api-version %q: want MAJOR.MINOR, such as 1.41", f.dockerAPI)
		}
		if f.dockerHost != "" && os.Getenv(dockerDefectEnv) != "" {
			return usageError(fs, "%s breaks the face; --docker-host certifies against a real daemon", dockerDefectEnv)
		}
	}
	if f.cloud == cloudDocker && f.cpi == "" && !f.common.List {
		return usageError(fs, "--cloud docker needs --cpi PATH: the BOSH Docker CPI binary (docs/docker.md says how to build it)")
	}
	return nil
}

// startCloud starts the embedded cloud for --cloud and returns the suites'
// config for the CPI command cpi.
func (f *certifyFlags) startCloud(cpi string) (*testbed.Testbed, cpisuite.Config, error) {
	tcfg := testbed.Config{}
	if f.cloud == cloudDocker && f.dockerHost == "" {
		tcfg.Docker = true
		tcfg.DockerDefect = dockerapi.Defect(os.Getenv(dockerDefectEnv))
		tcfg.DockerMaxAPIVersion = f.dockerAPI
	}
	if f.dockerHost != "" {
		tcfg.NoAgents = true // the containers run no cpilab agent
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		d, err := testbed.DialDocker(ctx, f.dockerHost)
		cancel()
		if err != nil {
			return nil, cpisuite.Config{}, err
		}
		if f.dockerAPI != "" {
			d.CPIMaxAPIVersion = f.dockerAPI
		}
		f.realDocker = d
	}
	tb, err := testbed.Start(tcfg)
	if err != nil {
		return nil, cpisuite.Config{}, err
	}
	var cfg cpisuite.Config
	switch {
	case f.realDocker != nil:
		cfg, err = tb.RealDockerSuiteConfig([]string{cpi}, f.realDocker)
	case f.cloud == cloudDocker:
		cfg, err = tb.DockerSuiteConfig([]string{cpi})
	default:
		cfg, err = tb.SuiteConfig([]string{cpi})
	}
	if err != nil {
		tb.Close()
		return nil, cpisuite.Config{}, err
	}
	return tb, cfg, nil
}

// cloudNote describes the embedded cloud for the run's notes.
func (f *certifyFlags) cloudNote(tb *testbed.Testbed) string {
	if d := f.realDocker; d != nil {
		return fmt.Sprintf("real Docker daemon %s (API %s) at %s; the CPI is configured for API %s; the CPI reaches it through a proxy that notes what it makes and injects the faults; the oracle reads the daemon (containers, volumes, images, events, the settings file by exec); no cpilab agents or SFTP there: those specs are not checked", d.Version, d.APIVersion, d.Host, d.CPIAPIVersion())
	}
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
	out := []string{"--cloud", f.cloud}
	if f.dockerHost != "" {
		out = append(out, "--docker-host", f.dockerHost)
	}
	if f.dockerAPI != "" {
		out = append(out, "--docker-api-version", f.dockerAPI)
	}
	return out
}

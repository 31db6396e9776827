package testbed

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// The Docker cloud (Config.Docker): the testbed also serves fakeiaas's
// Docker Engine API face (docs/docker.md) on a unix socket in its
// directory, over the same cloud, and its agents boot as on a docker
// stemcell: settings from the file the Docker CPI writes into the VM,
// persistent disks as bind-mounted directories.

// DockerAPIVersion is the Docker API version the Docker CPI config asks
// for (the face serves 1.24 to 1.52).
const DockerAPIVersion = "1.44"

// DockerNetwork is the name of the Docker network of the dynamic network
// the suites give create_vm (its cloud_properties.name); the Docker CPI
// creates it on the face. Dynamic, because the suites give every
// create_vm the same networks and two running containers cannot share a
// static address (Docker refuses the second start: "Address already in
// use", as the face does).
const DockerNetwork = "cpilab-net"

// dockerAgentBase is the agent configuration of a docker stemcell's agent
// (bosh-linux-stemcell-builder's warden/docker agent.json: a File settings
// source at /var/vcap/bosh/warden-cpi-agent-env.json, preformatted and
// bind-mounted persistent disks).
func dockerAgentBase(base agent.Config) agent.Config {
	base.SettingsFile = agent.WardenSettingsFile
	base.BindMountPersistentDisk = true
	return base
}

// startDocker serves the Docker face on Dir/docker.sock.
func (t *Testbed) startDocker() error {
	fc := dockerapi.Config{Cloud: t.IaaS.Cloud(), Defect: t.cfg.DockerDefect, MaxAPIVersion: t.cfg.DockerMaxAPIVersion}
	if v := t.cfg.DockerMaxAPIVersion; v != "" && apiLess(v, dockerapi.MinAPIVersion) {
		fc.MinAPIVersion = v
	}
	face, err := dockerapi.New(fc)
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	t.Docker, err = dockerapi.Serve(face, filepath.Join(t.cfg.Dir, "docker.sock"))
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	return nil
}

// DockerCPIConfig writes (once) the BOSH Docker CPI's config for this
// testbed and returns its path: the Docker host is the face's socket, the
// agents' mbus the embedded NATS.
//
//	{"Actions": {"Docker": {"host": "unix://DIR/docker.sock", "api_version": "1.44"},
//	             "Agent": {"mbus": "nats://127.0.0.1:PORT", "ntp": []}}}
func (t *Testbed) DockerCPIConfig() (string, error) {
	if t.Docker == nil {
		return "", errors.New("testbed: the Docker face is not running (Config.Docker)")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := filepath.Join(t.cfg.Dir, "config", "docker-cpi.json")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	cfg := map[string]any{"Actions": map[string]any{
		"Docker": map[string]any{"host": t.Docker.Host(), "api_version": t.dockerCPIAPIVersion()},
		"Agent":  map[string]any{"mbus": t.NATS.URL(), "ntp": []string{}},
	}}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return "", fmt.Errorf("testbed: %w", err)
	}
	return p, nil
}

// dockerCPIAPIVersion is the API version the Docker CPI config asks of
// the face: DockerAPIVersion, or Config.DockerMaxAPIVersion when lower.
func (t *Testbed) dockerCPIAPIVersion() string {
	if v := t.cfg.DockerMaxAPIVersion; v != "" {
		return minAPIVersion(v, DockerAPIVersion)
	}
	return DockerAPIVersion
}

// DockerStemcell writes (once) a stemcell tarball in the shape the Docker
// CPI imports (a gzipped tar it streams to the image import) and returns
// its path. The tar holds cpilab's stemcell image (dockerapi.ImageMember:
// the agent uses identity device paths, as a docker stemcell's does) of
// the given api_version.
func (t *Testbed) DockerStemcell(apiVersion int) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := filepath.Join(t.cfg.Dir, "stemcells", fmt.Sprintf("docker-stemcell-api%d.tgz", apiVersion))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	img := map[string]any{"name": "bosh-fakeiaas-ubuntu-jammy-docker", "version": "1.0",
		"agent": map[string]any{"device_path_resolution_type": agent.ResolverIdentity}}
	if apiVersion > 1 {
		img["api_version"] = apiVersion
	}
	b, err := json.Marshal(img)
	if err != nil {
		return "", err
	}
	tgz, err := stemcellTarball(b)
	if err != nil {
		return "", fmt.Errorf("testbed: %w", err)
	}
	if err := os.WriteFile(p, tgz, 0o644); err != nil {
		return "", fmt.Errorf("testbed: %w", err)
	}
	return p, nil
}

// stemcellTarball is a gzipped root file system holding image as
// dockerapi.ImageMember.
func stemcellTarball(image []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, d := range []string{"var/", "var/vcap/", "var/vcap/bosh/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: dockerapi.ImageMember, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(image))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(image); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DockerSuiteConfig returns a cpisuite.Config that certifies the BOSH Docker
// CPI run by command on this testbed's Docker face: its one config for
// every setup (it has neither a registry nor debug.cpi.api_version, so the
// setups capped at api_version 1 are not checked, saying so, and those
// needing api_version 3 say that its info reports 2), stemcells in
// its tarball shape, a dynamic network on DockerNetwork, and the oracle,
// agents, SFTP access and faults seen through the face (DockerOracle).
func (t *Testbed) DockerSuiteConfig(command []string) (cpisuite.Config, error) {
	cfgPath, err := t.DockerCPIConfig()
	if err != nil {
		return cpisuite.Config{}, err
	}
	stemcells := map[int]cpisuite.Stemcell{}
	for _, v := range []int{1, 2} {
		p, err := t.DockerStemcell(v)
		if err != nil {
			return cpisuite.Config{}, err
		}
		stemcells[v] = cpisuite.Stemcell{ImagePath: p}
	}
	cfg := cpisuite.Config{
		CPI:    dockerCPITarget(command, cfgPath),
		Env:    dockerEnvironment(stemcells),
		Oracle: DockerOracle{Cloud: t.IaaS.Cloud(), Face: t.Docker.Face()},
		Faults: Faults{t.IaaS.Cloud()},
	}
	if t.agents != nil {
		cfg.Agents = Agents{t}
	}
	if t.SSH != nil {
		cfg.Files = Files{t}
	}
	return cfg, nil
}

// dockerCPITarget runs the BOSH Docker CPI command with the config at
// cfgPath for every setup but those capped at api_version 1.
func dockerCPITarget(command []string, cfgPath string) cpisuite.Target {
	return cpisuite.Target{
		Command: command,
		ConfigPath: func(s cpisuite.Switch) (string, error) {
			if s.APIVersionCap == 1 {
				return "", fmt.Errorf("%w: the BOSH Docker CPI has no debug.cpi.api_version to cap it at 1 (its info always reports api_version 2)", cpisuite.ErrCannotSwitch)
			}
			return cfgPath, nil
		},
	}
}

// dockerEnvironment is the suites' environment on Docker, the face or a
// real daemon: the stemcells, the disk sizes of a volume, one dynamic
// network on DockerNetwork.
func dockerEnvironment(stemcells map[int]cpisuite.Stemcell) cpisuite.Environment {
	netProps := cpiv2.MustCloudProps(map[string]string{"name": DockerNetwork})
	return cpisuite.Environment{
		Stemcells: stemcells,
		// Docker volumes have no size and the Docker CPI passes none;
		// the face backs each volume with a disk of
		// dockerapi.DefaultVolumeSizeMiB. Asking for that size keeps
		// create_disk's own check about the disk it made; the specs
		// asking for other sizes (resize, the parallel spec's sizes)
		// show that the size is ignored.
		DiskSizeMiB: dockerapi.DefaultVolumeSizeMiB, ResizeToMiB: 2 * dockerapi.DefaultVolumeSizeMiB,
		// A dynamic network: the suites give every create_vm the same
		// networks, and two running containers cannot share a static
		// address (Docker: "Address already in use").
		Networks: cpiv2.Networks{"default": {Type: "dynamic", DNS: []string{"10.244.0.2"}, Default: []string{"dns", "gateway"}, CloudProperties: netProps}},
	}
}

// DockerOracle is the fakeiaas oracle seen through the Docker face, in the
// Docker CPI's CIDs: a VM is a container (its name), a disk a volume (its
// name), a stemcell an image (its reference). Every answer comes from the
// cloud's state and the face's tables, never from the CPI.
type DockerOracle struct {
	Cloud *fakeiaas.Cloud
	Face  *dockerapi.Face
}

var _ cpisuite.Oracle = DockerOracle{}

// Inventory lists every container, volume and image (ephemeral volumes
// included: a leaked one is a leak). Snapshots: Docker has none.
// UnseenCloudProperties: a container records the config the CPI made of a
// VM's cloud_properties, not the cloud_properties themselves
// (cpisuite.UnseenCloudProperties).
func (o DockerOracle) UnseenCloudProperties() string {
	return "a Docker container records the config the CPI made of the cloud_properties, not the cloud_properties themselves"
}

// FixedMetadata: Docker sets a container's and a volume's labels when it
// creates them and cannot change them after (cpisuite.FixedMetadata), so
// set_vm_metadata and set_disk_metadata have nothing they could change.
func (o DockerOracle) FixedMetadata() string {
	return "Docker sets container and volume labels at create time and cannot change them, so no set_vm_metadata or set_disk_metadata could show in the IaaS"
}

func (o DockerOracle) Inventory(ctx context.Context) (cpisuite.Inventory, error) {
	if err := ctx.Err(); err != nil {
		return cpisuite.Inventory{}, err
	}
	v := o.Face.View()
	var inv cpisuite.Inventory
	for ref := range v.Images {
		inv.Stemcells = append(inv.Stemcells, ref)
	}
	for n := range v.Containers {
		inv.VMs = append(inv.VMs, n)
	}
	for n := range v.Volumes {
		inv.Disks = append(inv.Disks, n)
	}
	sort.Strings(inv.Stemcells)
	sort.Strings(inv.VMs)
	sort.Strings(inv.Disks)
	return inv, nil
}

// VM returns the container's VM: its metadata and the volumes bound into
// it, each with the fakeiaas device of its disk.
func (o DockerOracle) VM(ctx context.Context, name string) (cpisuite.OracleVM, bool, error) {
	view := o.Face.View()
	cid, ok := view.Containers[name]
	if !ok {
		return cpisuite.OracleVM{}, false, nil
	}
	vm, err := o.Cloud.VM(ctx, cid)
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return cpisuite.OracleVM{}, false, nil
	}
	if err != nil {
		return cpisuite.OracleVM{}, false, err
	}
	byDisk := map[string]string{}
	for vol, vv := range view.Volumes {
		byDisk[vv.Disk.String()] = vol
	}
	out := cpisuite.OracleVM{Metadata: map[string]string(vm.Metadata), Disks: map[string]string{}, Boots: vm.Boots}
	for _, a := range vm.Attachments {
		vol, ok := byDisk[a.DiskCID.String()]
		if !ok {
			vol = a.DiskCID.String() // a disk the face does not know: shown as it is
		}
		out.Disks[vol] = a.Device
	}
	return out, true, nil
}

// Disk returns the volume's disk: size, metadata, cloud_properties, the
// container it is bound into and where (OracleDisk.Path: the bind target,
// a directory in the container).
func (o DockerOracle) Disk(ctx context.Context, name string) (cpisuite.OracleDisk, bool, error) {
	view := o.Face.View()
	vv, ok := view.Volumes[name]
	if !ok {
		return cpisuite.OracleDisk{}, false, nil
	}
	d, err := o.Cloud.Disk(ctx, vv.Disk)
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return cpisuite.OracleDisk{}, false, nil
	}
	if err != nil {
		return cpisuite.OracleDisk{}, false, err
	}
	out := cpisuite.OracleDisk{SizeMiB: d.SizeMiB, Metadata: map[string]string(d.Metadata), CloudProperties: d.CloudProperties, LUN: -1}
	if d.VMCID.IsZero() {
		return out, true, nil
	}
	// The disk is attached to a VM: name its container.
	for n, vm := range view.Containers {
		if vm == d.VMCID {
			out.AttachedTo = n
		}
	}
	if out.AttachedTo == "" {
		out.AttachedTo = d.VMCID.String()
	}
	out.Device = d.Device
	if out.AttachedTo == vv.BoundTo {
		out.Path = vv.Target
	}
	return out, true, nil
}

// Settings returns the settings the Docker CPI wrote into the container
// (agent.WardenSettingsFile in its VM root): there is no registry and no
// user-data on Docker.
func (o DockerOracle) Settings(ctx context.Context, name string) (cpisuite.OracleSettings, error) {
	if err := ctx.Err(); err != nil {
		return cpisuite.OracleSettings{}, err
	}
	cid, ok := o.Face.ContainerVM(name)
	if !ok {
		return cpisuite.OracleSettings{}, nil
	}
	b, err := os.ReadFile(filepath.Join(o.Cloud.VMRoot(cid), filepath.FromSlash(agent.WardenSettingsFile[1:])))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return cpisuite.OracleSettings{InVM: agent.WardenSettingsFile}, nil
	case err != nil:
		return cpisuite.OracleSettings{}, err
	}
	return cpisuite.OracleSettings{InVM: agent.WardenSettingsFile, File: b}, nil
}

// dockerVMOf is the fakeiaas VM of the container whose settings file names
// agentID ("" when none does): on Docker the cloud knows containers by
// name, and only the file the CPI wrote knows the BOSH agent ID.
func (t *Testbed) dockerVMOf(agentID string) string {
	for _, vm := range t.Docker.Face().View().Containers {
		b, err := os.ReadFile(filepath.Join(t.IaaS.Cloud().VMRoot(vm), filepath.FromSlash(agent.WardenSettingsFile[1:])))
		if err != nil {
			continue
		}
		var s struct {
			AgentID string `json:"agent_id"`
		}
		if json.Unmarshal(b, &s) == nil && s.AgentID == agentID {
			return vm.String()
		}
	}
	return ""
}

package director

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/cpilab/cpilab/cpiv2"
)

// CloudConfig is the cloud config: the IaaS choices manifests name.
type CloudConfig struct {
	AZs       []AZ       `yaml:"azs" json:"azs"`
	VMTypes   []VMType   `yaml:"vm_types" json:"vm_types"`
	DiskTypes []DiskType `yaml:"disk_types" json:"disk_types"`
	Networks  []Network  `yaml:"networks" json:"networks"`
}

// AZ is an availability zone; its cloud_properties merge into create_vm's.
type AZ struct {
	Name            string         `yaml:"name" json:"name"`
	CloudProperties map[string]any `yaml:"cloud_properties" json:"cloud_properties,omitempty"`
}

// VMType names create_vm cloud_properties.
type VMType struct {
	Name            string         `yaml:"name" json:"name"`
	CloudProperties map[string]any `yaml:"cloud_properties" json:"cloud_properties,omitempty"`
}

// DiskType is a disk pool: provide's disk_pool_name names one. DiskSize
// (MiB) is the default when a request gives none.
type DiskType struct {
	Name            string         `yaml:"name" json:"name"`
	DiskSize        int            `yaml:"disk_size" json:"disk_size"`
	CloudProperties map[string]any `yaml:"cloud_properties" json:"cloud_properties,omitempty"`
}

// Network is a network; every network is given to create_vm as a dynamic
// network with its first subnet's cloud_properties (the director does no IP
// management).
type Network struct {
	Name    string   `yaml:"name" json:"name"`
	Type    string   `yaml:"type" json:"type"`
	Subnets []Subnet `yaml:"subnets" json:"subnets,omitempty"`
}

// Subnet is one subnet of a network.
type Subnet struct {
	Range           string         `yaml:"range" json:"range,omitempty"`
	Gateway         string         `yaml:"gateway" json:"gateway,omitempty"`
	DNS             []string       `yaml:"dns" json:"dns,omitempty"`
	AZs             []string       `yaml:"azs" json:"azs,omitempty"`
	CloudProperties map[string]any `yaml:"cloud_properties" json:"cloud_properties,omitempty"`
}

func decodeYAML(text []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// ParseCloudConfig parses and validates a cloud config YAML document.
func ParseCloudConfig(text []byte) (*CloudConfig, error) {
	var cc CloudConfig
	if err := decodeYAML(text, &cc); err != nil {
		return nil, badField("cloud_config", "not a valid cloud config: %v", err)
	}
	seen := map[string]bool{}
	check := func(kind, name string, i int) error {
		field := fmt.Sprintf("%s[%d].name", kind, i)
		if name == "" {
			return badField(field, "is required")
		}
		if seen[kind+"/"+name] {
			return badField(field, "duplicate name %q", name)
		}
		seen[kind+"/"+name] = true
		return nil
	}
	for i, x := range cc.AZs {
		if err := check("azs", x.Name, i); err != nil {
			return nil, err
		}
	}
	for i, x := range cc.VMTypes {
		if err := check("vm_types", x.Name, i); err != nil {
			return nil, err
		}
	}
	for i, x := range cc.DiskTypes {
		if err := check("disk_types", x.Name, i); err != nil {
			return nil, err
		}
		if x.DiskSize < 0 {
			return nil, badField(fmt.Sprintf("disk_types[%d].disk_size", i), "must be ≥ 0 MiB")
		}
	}
	for i, x := range cc.Networks {
		if err := check("networks", x.Name, i); err != nil {
			return nil, err
		}
	}
	return &cc, nil
}

func (cc *CloudConfig) diskType(name string) (DiskType, bool) {
	for _, d := range cc.DiskTypes {
		if d.Name == name {
			return d, true
		}
	}
	return DiskType{}, false
}

func (cc *CloudConfig) vmType(name string) (VMType, bool) {
	for _, v := range cc.VMTypes {
		if v.Name == name {
			return v, true
		}
	}
	return VMType{}, false
}

func (cc *CloudConfig) az(name string) (AZ, bool) {
	for _, a := range cc.AZs {
		if a.Name == name {
			return a, true
		}
	}
	return AZ{}, false
}

func (cc *CloudConfig) network(name string) (Network, bool) {
	for _, n := range cc.Networks {
		if n.Name == name {
			return n, true
		}
	}
	return Network{}, false
}

// Manifest is a deployment manifest, as deep as the director needs.
type Manifest struct {
	Name           string             `yaml:"name"`
	Stemcells      []ManifestStemcell `yaml:"stemcells"`
	InstanceGroups []InstanceGroup    `yaml:"instance_groups"`
	Releases       []any              `yaml:"releases"`
	Update         map[string]any     `yaml:"update"`
	Features       map[string]any     `yaml:"features"`
}

// ManifestStemcell is a stemcells entry: by name or os, and version
// ("latest" or empty: the newest uploaded).
type ManifestStemcell struct {
	Alias   string `yaml:"alias"`
	Name    string `yaml:"name"`
	OS      string `yaml:"os"`
	Version string `yaml:"version"`
}

// InstanceGroup is an instance_groups entry.
type InstanceGroup struct {
	Name      string            `yaml:"name"`
	Instances int               `yaml:"instances"`
	AZs       []string          `yaml:"azs"`
	VMType    string            `yaml:"vm_type"`
	Stemcell  string            `yaml:"stemcell"`
	Networks  []ManifestNetwork `yaml:"networks"`
	Jobs      []any             `yaml:"jobs"`
	// Env is create_vm's env (the bosh hash).
	Env        map[string]any `yaml:"env"`
	Properties map[string]any `yaml:"properties"`
}

// ManifestNetwork is an instance group's network reference.
type ManifestNetwork struct {
	Name    string   `yaml:"name"`
	Default []string `yaml:"default"`
}

// ParseManifest parses a manifest and checks it against cc.
func ParseManifest(text []byte, cc *CloudConfig) (*Manifest, error) {
	var m Manifest
	if err := decodeYAML(text, &m); err != nil {
		return nil, badField("manifest", "not a valid manifest: %v", err)
	}
	if err := validName(m.Name); err != nil {
		return nil, badField("name", "%v", err)
	}
	aliases := map[string]bool{}
	for i, s := range m.Stemcells {
		if s.Alias == "" {
			return nil, badField(fmt.Sprintf("stemcells[%d].alias", i), "is required")
		}
		if s.Name == "" && s.OS == "" {
			return nil, badField(fmt.Sprintf("stemcells[%d]", i), "needs name or os")
		}
		aliases[s.Alias] = true
	}
	if cc == nil {
		cc = &CloudConfig{}
	}
	groups := map[string]bool{}
	for i, g := range m.InstanceGroups {
		f := func(s string) string { return fmt.Sprintf("instance_groups[%d].%s", i, s) }
		if err := validName(g.Name); err != nil {
			return nil, badField(f("name"), "%v", err)
		}
		if groups[g.Name] {
			return nil, badField(f("name"), "duplicate instance group %q", g.Name)
		}
		groups[g.Name] = true
		if g.Instances < 0 {
			return nil, badField(f("instances"), "must be ≥ 0")
		}
		if !aliases[g.Stemcell] {
			return nil, unprocessable("%s: stemcell alias %q is not in stemcells", f("stemcell"), g.Stemcell)
		}
		if _, ok := cc.vmType(g.VMType); !ok {
			return nil, unprocessable("%s: vm_type %q is not in the cloud config", f("vm_type"), g.VMType)
		}
		for _, az := range g.AZs {
			if _, ok := cc.az(az); !ok {
				return nil, unprocessable("%s: az %q is not in the cloud config", f("azs"), az)
			}
		}
		for _, n := range g.Networks {
			if _, ok := cc.network(n.Name); !ok {
				return nil, unprocessable("%s: network %q is not in the cloud config", f("networks"), n.Name)
			}
		}
	}
	return &m, nil
}

// StemcellManifest is stemcell.MF.
type StemcellManifest struct {
	Name            string         `yaml:"name" json:"name"`
	Version         string         `yaml:"version" json:"version"`
	OS              string         `yaml:"operating_system" json:"operating_system"`
	APIVersion      int            `yaml:"api_version" json:"api_version"`
	StemcellFormats []string       `yaml:"stemcell_formats" json:"stemcell_formats"`
	CloudProperties map[string]any `yaml:"cloud_properties" json:"cloud_properties"`
	SHA1            string         `yaml:"sha1" json:"sha1"`
	BOSHProtocol    any            `yaml:"bosh_protocol" json:"bosh_protocol"`
}

// ParseStemcellManifest parses stemcell.MF; an absent api_version is 1.
func ParseStemcellManifest(text []byte) (*StemcellManifest, error) {
	var mf StemcellManifest
	if err := yaml.Unmarshal(text, &mf); err != nil {
		return nil, badField("stemcell.MF", "not valid YAML: %v", err)
	}
	if mf.Name == "" {
		return nil, badField("stemcell.MF name", "is required")
	}
	if mf.Version == "" {
		return nil, badField("stemcell.MF version", "is required")
	}
	if mf.APIVersion < 0 {
		return nil, badField("stemcell.MF api_version", "must be ≥ 1")
	}
	if mf.APIVersion == 0 {
		mf.APIVersion = 1
	}
	return &mf, nil
}

func cloudProps(parts ...map[string]any) cpiv2.CloudProps {
	merged := map[string]any{}
	for _, p := range parts {
		for k, v := range p {
			merged[k] = v
		}
	}
	if len(merged) == 0 {
		return cpiv2.CloudProps{}
	}
	return cpiv2.MustCloudProps(merged)
}

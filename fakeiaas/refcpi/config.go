package refcpi

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cpilab/cpilab/internal/strictjson"
	"github.com/cpilab/cpilab/rt"
)

// Config configures the reference CPI.
type Config struct {
	// MaxAPIVersion is the highest api_version the CPI speaks: cpi.json's
	// debug.cpi.api_version (1, 2 or 3; default 3).
	MaxAPIVersion int
	// Registry is the BOSH Registry for the v1 settings flow;
	// nil means none is configured, and a call that needs it fails with a
	// CloudError saying so.
	Registry Registry
	// RegistryEndpoint is the registry URL written into user-data in the
	// registry flow (the agent reads its settings there).
	RegistryEndpoint string
	// MBus is the agent's mbus URL written into its settings (agent.mbus).
	MBus string
	// Blobstore is the agent's blobstore settings (agent.blobstore), kept raw.
	Blobstore json.RawMessage
	// NTP are the agent's NTP servers (agent.ntp).
	NTP []string
	// Retry says how rate-limited IaaS calls are retried.
	Retry RetryConfig
	// Runtime supplies the clock for retry back-off (default rt.Real(0)).
	Runtime rt.Runtime
	// Log receives a line per retry (the call's debug log; nil: discard).
	Log io.Writer
}

// RetryConfig is cpi.json's fakeiaas.retry.
type RetryConfig struct {
	// MaxAttempts is how many times a rate-limited call is tried in all
	// (default 5).
	MaxAttempts int
	// BaseDelay is the first back-off; it doubles per attempt, and a longer
	// Retry-After from the IaaS wins (default 10ms).
	BaseDelay time.Duration
}

// FileConfig is cpi.json (docs/seams.md):
//
//	{"cloud": {"plugin": "fakeiaas", "properties": {
//	  "fakeiaas": {"url": "http://127.0.0.1:PORT", "retry": {"max_attempts": 5, "base_delay_ms": 10}},
//	  "registry": {"endpoint": "http://127.0.0.1:PORT/registry", "user": "u", "password": "p"},
//	  "agent": {"mbus": "nats://127.0.0.1:PORT"},
//	  "debug": {"cpi": {"api_version": 2}}}}}
type FileConfig struct {
	Cloud struct {
		Plugin     string     `json:"plugin"`
		Properties Properties `json:"properties"`
	} `json:"cloud"`
}

// Properties are cpi.json's cloud.properties.
type Properties struct {
	Fakeiaas struct {
		// URL is the fakeiaas base URL (required).
		URL   string `json:"url"`
		Retry struct {
			MaxAttempts int `json:"max_attempts"`
			BaseDelayMS int `json:"base_delay_ms"`
		} `json:"retry"`
	} `json:"fakeiaas"`
	// Registry is absent when no registry is configured.
	Registry *struct {
		Endpoint string `json:"endpoint"`
		User     string `json:"user"`
		Password string `json:"password"`
	} `json:"registry,omitempty"`
	Agent struct {
		MBus      string          `json:"mbus"`
		Blobstore json.RawMessage `json:"blobstore,omitempty"`
		NTP       []string        `json:"ntp,omitempty"`
	} `json:"agent"`
	Debug struct {
		CPI struct {
			APIVersion int `json:"api_version"`
		} `json:"cpi"`
	} `json:"debug"`
}

// LoadFileConfig reads and checks cpi.json.
func LoadFileConfig(path string) (FileConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, fmt.Errorf("reading CPI config: %w", err)
	}
	var fc FileConfig
	if err := strictjson.Unmarshal(data, &fc); err != nil {
		return FileConfig{}, fmt.Errorf("CPI config %s: %w", path, err)
	}
	p := fc.Cloud.Properties
	if fc.Cloud.Plugin != "" && fc.Cloud.Plugin != "fakeiaas" {
		return FileConfig{}, fmt.Errorf("CPI config %s: cloud.plugin is %q, want \"fakeiaas\"", path, fc.Cloud.Plugin)
	}
	if p.Fakeiaas.URL == "" {
		return FileConfig{}, fmt.Errorf("CPI config %s: cloud.properties.fakeiaas.url is required", path)
	}
	if v := p.Debug.CPI.APIVersion; v < 0 || v > 3 {
		return FileConfig{}, fmt.Errorf("CPI config %s: debug.cpi.api_version %d: want 1, 2 or 3", path, v)
	}
	if p.Registry != nil && p.Registry.Endpoint == "" {
		return FileConfig{}, fmt.Errorf("CPI config %s: registry.endpoint is required when a registry block is given", path)
	}
	return fc, nil
}

// Config returns the CPI Config the file describes. A registry block
// becomes an HTTPRegistry on its endpoint; Runtime and Log are left for the
// caller.
func (fc FileConfig) Config() Config {
	p := fc.Cloud.Properties
	cfg := Config{
		MaxAPIVersion: p.Debug.CPI.APIVersion,
		MBus:          p.Agent.MBus, Blobstore: p.Agent.Blobstore, NTP: p.Agent.NTP,
		Retry: RetryConfig{MaxAttempts: p.Fakeiaas.Retry.MaxAttempts, BaseDelay: time.Duration(p.Fakeiaas.Retry.BaseDelayMS) * time.Millisecond},
	}
	if p.Registry != nil {
		cfg.RegistryEndpoint = p.Registry.Endpoint
		cfg.Registry = NewHTTPRegistry(p.Registry.Endpoint, p.Registry.User, p.Registry.Password)
	}
	return cfg
}

// FileSpec is what a cpi.json for the reference CPI says (docs/seams.md):
// the one place cpilab writes that file (the testbed, the director's lab).
type FileSpec struct {
	// URL is the fakeiaas base URL.
	URL string
	// RegistryEndpoint, RegistryUser and RegistryPassword make the registry
	// block; an empty endpoint leaves it out (the current Director).
	RegistryEndpoint, RegistryUser, RegistryPassword string
	// MBus is agent.mbus: the URL the agents' settings name.
	MBus string
	// APIVersionCap is debug.cpi.api_version; 0 leaves the debug block out
	// (the CPI's own maximum).
	APIVersionCap int
}

// WriteFileConfig writes spec as cpi.json to path, readable by
// LoadFileConfig.
func WriteFileConfig(path string, spec FileSpec) error {
	props := map[string]any{
		"fakeiaas": map[string]any{"url": spec.URL, "retry": map[string]any{"max_attempts": 5, "base_delay_ms": 10}},
		"agent":    map[string]any{"mbus": spec.MBus},
	}
	if spec.RegistryEndpoint != "" {
		reg := map[string]any{"endpoint": spec.RegistryEndpoint}
		if spec.RegistryUser != "" || spec.RegistryPassword != "" {
			reg["user"], reg["password"] = spec.RegistryUser, spec.RegistryPassword
		}
		props["registry"] = reg
	}
	if spec.APIVersionCap > 0 {
		props["debug"] = map[string]any{"cpi": map[string]any{"api_version": spec.APIVersionCap}}
	}
	b, err := json.MarshalIndent(map[string]any{"cloud": map[string]any{"plugin": "fakeiaas", "properties": props}}, "", "  ")
	if err != nil {
		return fmt.Errorf("cpi.json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing cpi.json: %w", err)
	}
	return nil
}

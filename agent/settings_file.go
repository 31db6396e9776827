package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
)

// WardenSettingsFile is where the BOSH Warden and Docker CPIs write the
// agent settings inside the VM (bosh-docker-cpi vm/fs_agent_env_service.go),
// and where warden and docker stemcells point bosh-agent's File settings
// source (agent.json Infrastructure.Settings.Sources: [{Type: File,
// SettingsPath: /var/vcap/bosh/warden-cpi-agent-env.json}]).
const WardenSettingsFile = "/var/vcap/bosh/warden-cpi-agent-env.json"

// SourceFile is SettingsSource's answer when the settings came from
// Config.SettingsFile.
const SourceFile = "file"

// ErrNoSettingsFile is wrapped by the error of an agent whose
// Config.SettingsFile does not exist (yet): the CPI writes it after the VM
// has booted, so Fleet.Start keeps trying until it appears.
var ErrNoSettingsFile = errors.New("settings file not written yet")

// readSettingsFile is bosh-agent's FileSettingsSource
// (infrastructure/file_settings_source.go): the settings are the JSON of
// the file, here the CPI's AgentEnv (bosh-cpi-go apiv1/agent_env.go):
// agent_id, vm {name, id}, mbus, ntp, blobstore, networks, disks {system,
// ephemeral, persistent {disk cid: hint}}, env. A hint is a string (the
// Docker CPI's "/warden-cpi-dev/<volume>") or a hash ({"path": …}). The
// file is read strictly inside the root (no symlink is followed), as the
// agent's own files are.
func (a *Agent) readSettingsFile() (Settings, error) {
	p := a.cfg.SettingsFile
	b, err := a.root.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Settings{}, fmt.Errorf("agent: reading %s: %w", p, ErrNoSettingsFile)
	}
	if err != nil {
		return Settings{}, fmt.Errorf("agent: reading %s: %w", p, err)
	}
	return parseSettingsFile(p, b)
}

// parseSettingsFile decodes the settings file at p (for error messages).
// Upstream unmarshals whatever is there; a file without agent_id is refused
// here, since an agent cannot subscribe without one (a half-written file is
// not mistaken for settings).
func parseSettingsFile(p string, b []byte) (Settings, error) {
	var s Settings
	if err := json.Unmarshal(b, &s); err != nil {
		return Settings{}, fmt.Errorf("agent: parsing the settings in %s: %w", p, err)
	}
	if s.AgentID == "" {
		return Settings{}, fmt.Errorf("agent: the settings in %s have no agent_id", p)
	}
	for cid := range s.Disks.Persistent {
		if cid == "" {
			return Settings{}, fmt.Errorf("agent: the settings in %s name a persistent disk with an empty CID", p)
		}
	}
	return s, nil
}

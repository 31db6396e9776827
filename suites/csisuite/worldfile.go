package csisuite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/suites/flex"
)

// WorldFile describes an embedded world a driver started by someone else
// runs on (cpilab certify-csi --serve-world writes it, --world reads it):
// what the BOSH checks need to judge that driver through its endpoints.
type WorldFile struct {
	DirectorURL string `json:"director_url"`
	CACert      string `json:"ca_cert"`
	// Client and Secret are the disk-scoped client the driver must use.
	Client string `json:"client"`
	Secret string `json:"client_secret"`
	// AdminClient and AdminSecret are the harness's (oracle, clean-up).
	AdminClient string      `json:"admin_client"`
	AdminSecret string      `json:"admin_secret"`
	DiskPool    string      `json:"disk_pool"`
	Deployment  string      `json:"deployment"`
	AZ          string      `json:"az"`
	CloudDir    string      `json:"cloud_dir"`
	Resize      bool        `json:"resize"`
	Nodes       []WorldNode `json:"nodes"`
}

// WorldNode is one node of the world.
type WorldNode struct {
	Name       string `json:"name"`
	InstanceID string `json:"instance_id"`
	Root       string `json:"root"`
}

// WriteWorld writes env's description to path.
func WriteWorld(path string, env *flex.Env) error {
	w := WorldFile{DirectorURL: env.DirectorURL, CACert: string(env.CACertPEM), Client: env.Client, Secret: env.Secret,
		AdminClient: "admin", AdminSecret: "admin", DiskPool: env.DiskPool, Deployment: "flex", AZ: "z1", CloudDir: env.CloudDir, Resize: env.Resize}
	for _, n := range env.Nodes {
		w.Nodes = append(w.Nodes, WorldNode{Name: n.Name, InstanceID: n.InstanceID, Root: n.Root})
	}
	raw, err := json.MarshalIndent(w, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o600)
}

// LoadWorld reads a world file and logs in as its admin.
func LoadWorld(ctx context.Context, path string) (*flex.Env, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var w WorldFile
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("world file %s: %w", path, err)
	}
	if w.DirectorURL == "" || w.CloudDir == "" || len(w.Nodes) < 2 {
		return nil, fmt.Errorf("world file %s: director_url, cloud_dir and two nodes are required", path)
	}
	admin, err := director.NewClient(director.ClientConfig{URL: w.DirectorURL, CACertPEM: []byte(w.CACert), Username: w.AdminClient, Password: w.AdminSecret})
	if err != nil {
		return nil, fmt.Errorf("world file %s: %w", path, err)
	}
	if err := admin.Login(ctx); err != nil {
		return nil, fmt.Errorf("world file %s: log in as %s: %w", path, w.AdminClient, err)
	}
	env := &flex.Env{DirectorURL: w.DirectorURL, CACertPEM: []byte(w.CACert), Client: w.Client, Secret: w.Secret, DiskPool: w.DiskPool,
		CloudDir: w.CloudDir, Admin: admin, Resize: w.Resize}
	for _, n := range w.Nodes {
		env.Nodes = append(env.Nodes, flex.EnvNode{Name: n.Name, InstanceID: n.InstanceID, Root: n.Root})
	}
	return env, nil
}

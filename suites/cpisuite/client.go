package cpisuite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cpilab/cpilab/cpiv2"
)

// Client calls the CPI under test as one caller profile in one setup. It is
// safe for concurrent use. Every call returns its *Exchange, so a spec can
// show the request and response of whatever went wrong.
type Client struct {
	Profile cpiv2.Profile
	Switch  Switch
	// Info is the CPI's info result, CPIMax its api_version (0: none).
	Info   cpiv2.Info
	CPIMax int
	// APIVersion is the negotiated api_version: the result shapes to expect.
	APIVersion int

	w  *wire
	mu sync.Mutex
	// stemcellOf maps VM CIDs to the api_version of their stemcell.
	stemcellOf map[string]int
}

// NewClient runs info as p would and negotiates. The error wraps
// ErrCannotSwitch, ErrRefused (with the client still returned, so Info can
// be inspected), or is the info call's failure.
func NewClient(ctx context.Context, cfg Config, p cpiv2.Profile, s Switch) (*Client, *Exchange, error) {
	cfg = cfg.withDefaults()
	argv, err := cfg.CPI.command(s)
	if err != nil {
		return nil, nil, err
	}
	c := &Client{Profile: p, Switch: s, stemcellOf: map[string]int{}, w: &wire{
		command: argv, timeout: cfg.Timeouts.Call, directorUUID: cfg.RunID + "-director",
		seq: new(atomic.Int64), noRequestID: p.Name == cpiv2.ProfileCLI.Name,
		secrets: configSecrets(argv),
		frame:   framerFor(cfg, argv),
	}}
	x := c.w.call(ctx, cpiv2.MethodInfo, nil, p.InfoAPIVersion, 0)
	if err := x.Err(); err != nil {
		return nil, x, fmt.Errorf("info: %w", err)
	}
	var raw struct {
		StemcellFormats []string        `json:"stemcell_formats"`
		APIVersion      json.RawMessage `json:"api_version"`
	}
	if err := json.Unmarshal(x.Response.Result, &raw); err != nil {
		return nil, x, fmt.Errorf("%w: info result must be a hash {stemcell_formats, api_version}, got %s", ErrProtocol, excerpt(x.Response.Result))
	}
	c.Info.StemcellFormats = raw.StemcellFormats
	if c.CPIMax, err = infoAPIVersion(p, raw.APIVersion); err != nil {
		return nil, x, err
	}
	c.Info.APIVersion = c.CPIMax
	c.APIVersion, err = negotiate(p, c.CPIMax)
	if err != nil {
		return c, x, err
	}
	return c, x, nil
}

// infoAPIVersion reads info's api_version as caller p does: absent means a
// CPI at api_version 1 (0 returned); null, a string or a value below 1 is
// an error for every caller. The bosh CLI takes any JSON number and drops
// its fraction (cloud.go infoParser); the Director needs an integer.
func infoAPIVersion(p cpiv2.Profile, raw json.RawMessage) (int, error) {
	if len(raw) == 0 {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || string(raw) == "null" {
		return 0, fmt.Errorf("%w: info api_version must be an integer, got %s", ErrInfoVersion, excerpt(raw))
	}
	v := int(f)
	if float64(v) != f && p.Name != cpiv2.ProfileCLI.Name {
		return 0, fmt.Errorf("%w: info api_version must be an integer, got %s (the bosh CLI would truncate it; the Director cannot use it)", ErrInfoVersion, excerpt(raw))
	}
	if v < 1 {
		return 0, fmt.Errorf("%w: info api_version must be at least 1, got %s", ErrInfoVersion, excerpt(raw))
	}
	return v, nil
}

// Call sends one request with the negotiated api_version; vmCID, when not
// empty, selects the stemcell api_version sent in the context.
func (c *Client) Call(ctx context.Context, method string, vmCID string, args ...any) *Exchange {
	return c.w.call(ctx, method, args, c.sentAPIVersion(), c.stemcellFor(vmCID))
}

// CallRaw sends a request with an explicit api_version (0: none) and
// stemcell api_version, for specs about negotiation itself.
func (c *Client) CallRaw(ctx context.Context, method string, apiVersion, stemcellAPIVersion int, args ...any) *Exchange {
	return c.w.call(ctx, method, args, apiVersion, stemcellAPIVersion)
}

func (c *Client) sentAPIVersion() int {
	if !c.Profile.SendsAPIVersion || !c.Profile.Negotiates {
		return 0
	}
	return c.APIVersion
}

func (c *Client) stemcellFor(vmCID string) int {
	if !c.Profile.SendsStemcellAPIVersion || vmCID == "" {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stemcellOf[vmCID]
}

// VMRequest is create_vm's input as the suites build it.
type VMRequest struct {
	AgentID            string
	StemcellCID        string
	StemcellAPIVersion int
	CloudProperties    cpiv2.CloudProps
	Networks           cpiv2.Networks
	DiskCIDs           []string
	Env                map[string]any
}

// CreateVM calls create_vm, sending the stemcell's api_version in the
// context as the profile does.
func (c *Client) CreateVM(ctx context.Context, r VMRequest) *Exchange {
	disks := r.DiskCIDs
	if disks == nil {
		disks = []string{}
	}
	env := r.Env
	if env == nil {
		env = map[string]any{"bosh": map[string]any{"group": "cpilab"}}
	}
	sv := 0
	if c.Profile.SendsStemcellAPIVersion {
		sv = r.StemcellAPIVersion
	}
	return c.w.call(ctx, cpiv2.MethodCreateVM,
		[]any{r.AgentID, r.StemcellCID, r.CloudProperties, r.Networks, disks, env},
		c.sentAPIVersion(), sv)
}

// RememberVM records the stemcell api_version of a created VM, sent in the
// context of later calls on it.
func (c *Client) RememberVM(vmCID string, stemcellAPIVersion int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stemcellOf[vmCID] = stemcellAPIVersion
}

// DecodeVMCID decodes create_vm's result at the negotiated api_version: a
// plain CID at 1, [cid, networks] at 2 and above. The error says which shape
// was expected and what came instead.
func (c *Client) DecodeVMCID(result json.RawMessage) (string, error) {
	if c.APIVersion >= 2 {
		var pair []json.RawMessage
		if err := json.Unmarshal(result, &pair); err != nil || len(pair) != 2 {
			return "", fmt.Errorf("at api_version %d create_vm must return [vm_cid, networks], got %s", c.APIVersion, excerpt(result))
		}
		cid, err := decodeCID[cpiv2.VMKind](pair[0])
		if err != nil {
			return "", fmt.Errorf("at api_version %d create_vm must return [vm_cid, networks]: %w", c.APIVersion, err)
		}
		var nets map[string]json.RawMessage
		if err := json.Unmarshal(pair[1], &nets); err != nil || nets == nil {
			return "", fmt.Errorf("at api_version %d create_vm's second element must be the networks hash, got %s", c.APIVersion, excerpt(pair[1]))
		}
		return cid, nil
	}
	cid, err := decodeCID[cpiv2.VMKind](result)
	if err != nil {
		return "", fmt.Errorf("at api_version 1 create_vm must return a plain vm_cid: %w", err)
	}
	return cid, nil
}

// decodeCID decodes a non-empty CID string of kind K.
func decodeCID[K cpiv2.CIDKind](b json.RawMessage) (string, error) {
	var cid cpiv2.CID[K]
	if err := json.Unmarshal(b, &cid); err != nil {
		return "", err
	}
	if cid.IsZero() {
		return "", fmt.Errorf("expected a CID, got null")
	}
	return cid.String(), nil
}

func randomRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "cpilab-" + hex.EncodeToString(b[:])
}

// names makes unique names under a run ID.
type names struct {
	prefix string
	n      atomic.Int64
}

func (n *names) next(kind string) string {
	return fmt.Sprintf("%s-%s-%d", n.prefix, kind, n.n.Add(1))
}

package fakeiaas

// The fake cloud's stemcells: images a CPI uploads, their tags and api_version.

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/cpilab/cpilab/cpiv2"
)

type stemcellImage struct {
	Name       string          `json:"name"`
	Version    json.RawMessage `json:"version"`
	APIVersion int             `json:"api_version"`
	Agent      json.RawMessage `json:"agent"`
}

// CreateStemcell records a stemcell from its image (the small JSON of
// fixtures/stemcells: name, version, api_version, agent).
func (c *Cloud) CreateStemcell(ctx context.Context, spec StemcellSpec) (Stemcell, error) {
	var out Stemcell
	err := c.mutate(ctx, OpCreateStemcell, "", func(cl *call, b *batch) *Error {
		if e := checkCount("create_stemcell", "stemcells", len(c.stemcells), MaxStemcells, "MaxStemcells"); e != nil {
			return e
		}
		if e := checkName("create_stemcell: image path", spec.ImagePath); e != nil {
			return e
		}
		if e := checkDoc("create_stemcell: image", spec.Image); e != nil {
			return e
		}
		if e := checkDoc("create_stemcell: cloud_properties", spec.CloudProperties); e != nil {
			return e
		}
		if e := checkMetadata("create_stemcell: tags", spec.Tags); e != nil {
			return e
		}
		var img stemcellImage
		if err := json.Unmarshal(spec.Image, &img); err != nil {
			return invalid("stemcell image %q is not a fakeiaas image (JSON with name, version, api_version, agent): %v", spec.ImagePath, err)
		}
		if img.APIVersion < 0 {
			return invalid("stemcell image %q: api_version %d", spec.ImagePath, img.APIVersion)
		}
		if img.APIVersion == 0 {
			img.APIVersion = 1
		}
		cp, e := checkHash("stemcell cloud_properties", spec.CloudProperties)
		if e != nil {
			return e
		}
		var agent struct {
			Resolver string `json:"device_path_resolution_type"`
		}
		if len(img.Agent) > 0 {
			if err := json.Unmarshal(img.Agent, &agent); err != nil {
				return invalid("stemcell image %q: agent block: %v", spec.ImagePath, err)
			}
		}
		if agent.Resolver == "" {
			agent.Resolver = "identity"
		}
		version := string(img.Version)
		var vs string
		if json.Unmarshal(img.Version, &vs) == nil {
			version = vs
		}
		cid, e := c.newCIDLocked(kindStemcell, "sc")
		if e != nil {
			return e
		}
		s := &Stemcell{
			CID: cpiv2.MustCID[cpiv2.StemcellKind](cid), Name: img.Name, Version: version, ImagePath: spec.ImagePath,
			APIVersion: img.APIVersion, Agent: img.Agent, DeviceResolver: agent.Resolver,
			CloudProperties: cp, Tags: spec.Tags, Created: c.r.Now(),
		}
		c.stemcells[cid] = s
		b.create(kindStemcell, cid, s)
		cl.h.Target = cid
		cl.h.Detail = "api_version=" + strconv.Itoa(img.APIVersion)
		out = *s
		return nil
	})
	return out, err
}

// DeleteStemcell deletes a stemcell; VMs made from it keep running.
func (c *Cloud) DeleteStemcell(ctx context.Context, cid cpiv2.StemcellCID) error {
	return c.mutate(ctx, OpDeleteStemcell, cid.String(), func(cl *call, b *batch) *Error {
		if _, ok := c.stemcells[cid.String()]; !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "stemcell %q not found", cid)
		}
		delete(c.stemcells, cid.String())
		b.del(kindStemcell, cid.String())
		return nil
	})
}

// Stemcell returns a stemcell (ErrNotFound when absent).
func (c *Cloud) Stemcell(ctx context.Context, cid cpiv2.StemcellCID) (Stemcell, error) {
	var out Stemcell
	err := c.read(ctx, OpGetStemcell, cid.String(), false, func(*call) *Error {
		s, ok := c.stemcells[cid.String()]
		if !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "stemcell %q not found", cid)
		}
		out = *s
		return nil
	})
	return out, err
}

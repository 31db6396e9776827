package fakeiaas

// The fake cloud's BOSH Registry (v1 flow) and metadata service (user-data, v2 flow).

import (
	"context"
	"encoding/json"

	"github.com/cpilab/cpilab/cpiv2"
)

// GetSettings returns a VM's registry settings (ErrNotFound when absent).
func (c *Cloud) GetSettings(ctx context.Context, vmCID string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.read(ctx, OpRegistryGet, vmCID, true, func(*call) *Error {
		s, ok := c.registry[vmCID]
		if !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "registry: no settings for %q", vmCID)
		}
		out = append(json.RawMessage(nil), s...)
		return nil
	})
	return out, err
}

// PutSettings stores a VM's registry settings (a JSON hash).
func (c *Cloud) PutSettings(ctx context.Context, vmCID string, settings json.RawMessage) error {
	return c.mutate(ctx, OpRegistryPut, vmCID, func(cl *call, b *batch) *Error {
		if vmCID == "" {
			return invalid("registry: empty instance id")
		}
		if e := checkName("registry: instance id", vmCID); e != nil {
			return e
		}
		if e := checkDoc("registry settings", settings); e != nil {
			return e
		}
		if _, ok := c.registry[vmCID]; !ok && len(c.registry) >= MaxVMs {
			return tooLarge("registry: it holds settings for %d instances, its limit (MaxVMs)", len(c.registry))
		}
		s, e := checkHash("registry settings", settings)
		if e != nil {
			return e
		}
		if s == nil {
			return invalid("registry: empty settings for %q", vmCID)
		}
		c.registry[vmCID] = s
		b.put(kindRegistry, vmCID, s)
		return nil
	})
}

// DeleteSettings deletes a VM's registry settings (ErrNotFound when absent).
func (c *Cloud) DeleteSettings(ctx context.Context, vmCID string) error {
	return c.mutate(ctx, OpRegistryDelete, vmCID, func(cl *call, b *batch) *Error {
		if _, ok := c.registry[vmCID]; !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "registry: no settings for %q", vmCID)
		}
		delete(c.registry, vmCID)
		b.del(kindRegistry, vmCID)
		return nil
	})
}

// UserData returns the user-data a VM was created with, as the metadata
// service serves it (VMNotFound when the VM is absent).
func (c *Cloud) UserData(ctx context.Context, vmCID string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.read(ctx, OpMetadataGet, vmCID, true, func(*call) *Error {
		vm, ok := c.vms[vmCID]
		if !ok {
			return vmNotFound(vmCID)
		}
		out = append(json.RawMessage(nil), vm.UserData...)
		if len(out) == 0 {
			out = json.RawMessage("{}")
		}
		return nil
	})
	return out, err
}

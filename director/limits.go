package director

import (
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// Bounds on what the director accepts from outside (the HTTP API and the
// operations it calls). A request past one is refused before any task is
// queued, with a 400 (422 for the contents of a stemcell tarball) naming the
// field and the limit. Each is a documented constant; none is configurable,
// so that every director accepts the same requests.
const (
	// MaxDiskSizeMiB bounds disk_size (provide, create) and a cloud
	// config disk type's disk_size: 64 TiB, in MiB, the largest volume the
	// major clouds offer. 2^44 MiB (16 EiB) or more would overflow the
	// byte sizes a CPI computes.
	MaxDiskSizeMiB = 64 << 20

	// MaxIDLen bounds instance IDs and CIDs given in requests (bytes).
	// The director's own are UUIDs (36 bytes) and CIDs of a few dozen.
	MaxIDLen = 255

	// MaxPathLen bounds a file path given in a request (a stemcell's
	// location or image_path): Linux's PATH_MAX.
	MaxPathLen = 4096

	// MaxMetadataKeys bounds the keys of a disk's metadata (the major
	// clouds allow 50 to 64 tags or labels per resource).
	MaxMetadataKeys = 64
	// MaxMetadataKeyLen bounds one metadata key (bytes).
	MaxMetadataKeyLen = 128
	// MaxMetadataValueLen bounds one metadata value (bytes).
	MaxMetadataValueLen = 256

	// MaxCloudConfigBytes bounds a cloud config's YAML.
	MaxCloudConfigBytes = 1 << 20
	// MaxManifestBytes bounds a deployment manifest's YAML.
	MaxManifestBytes = 2 << 20
	// MaxCloudConfigEntries bounds each list of a cloud config (azs,
	// vm_types, disk_types, networks) and each network's subnets.
	MaxCloudConfigEntries = 1000
	// MaxInstanceGroups bounds a manifest's instance groups.
	MaxInstanceGroups = 1000
	// MaxInstancesPerGroup bounds an instance group's instances.
	MaxInstancesPerGroup = 1000

	// MaxStemcellManifestBytes bounds stemcell.MF.
	MaxStemcellManifestBytes = 1 << 20
	// MaxStemcellImageBytes bounds a stemcell tarball's image (unpacked).
	MaxStemcellImageBytes = 1 << 30
	// MaxStemcellTarballBytes bounds a stemcell tarball's own size.
	MaxStemcellTarballBytes = 2 << 30
	// MaxStemcellTarEntries bounds the entries read from a stemcell
	// tarball (upstream's hold a handful).
	MaxStemcellTarEntries = 1000

	// MaxTaskListLimit bounds GET /tasks?limit=.
	MaxTaskListLimit = 10000
	// MaxQueryValueLen bounds any one query parameter's value (bytes).
	MaxQueryValueLen = 1024
	// MaxOrphanCIDs bounds the CIDs of one orphaned-disk deletion.
	MaxOrphanCIDs = 1000
)

// tooBig is a request past one of the bounds: 400 naming the field.
func tooBig(field string, got, limit int, unit string) *Error {
	return badField(field, "is %d %s; at most %d", got, unit, limit)
}

// checkDiskSize checks a requested disk_size (MiB; 0: the disk type's).
func checkDiskSize(field string, size int) error {
	switch {
	case size < 0:
		return badField(field, "must be ≥ 0 MiB; got %d", size)
	case size > MaxDiskSizeMiB:
		return tooBig(field, size, MaxDiskSizeMiB, "MiB (64 TiB)")
	}
	return nil
}

// checkID checks an ID or CID given in a request: bounded, valid UTF-8.
func checkID(field, id string) error {
	switch {
	case len(id) > MaxIDLen:
		return tooBig(field, len(id), MaxIDLen, "bytes")
	case !utf8.ValidString(id):
		return badField(field, "%q is not valid UTF-8", id)
	}
	return nil
}

// checkMetadataLimits checks a disk's metadata: its key count, and each key
// and value (non-empty key, bounded, valid UTF-8).
func checkMetadataLimits(m map[string]any) error {
	if len(m) > MaxMetadataKeys {
		return tooBig("metadata", len(m), MaxMetadataKeys, "keys")
	}
	for k, v := range m {
		switch {
		case k == "":
			return badField("metadata", "keys must not be empty")
		case len(k) > MaxMetadataKeyLen:
			return tooBig("metadata", len(k), MaxMetadataKeyLen, fmt.Sprintf("bytes in key %.32q…", k))
		case !utf8.ValidString(k):
			return badField("metadata", "key %q is not valid UTF-8", k)
		}
		// A value is sent to the CPI as a string: itself, or its JSON text.
		sv, ok := v.(string)
		if !ok {
			b, err := json.Marshal(v)
			if err != nil {
				return badField("metadata."+k, "cannot be encoded: %v", err)
			}
			sv = string(b)
		}
		switch {
		case len(sv) > MaxMetadataValueLen:
			return tooBig("metadata."+k, len(sv), MaxMetadataValueLen, "bytes")
		case !utf8.ValidString(sv):
			return badField("metadata."+k, "%q is not valid UTF-8", sv)
		}
	}
	return nil
}

// checkCloudConfigLimits checks a cloud config's size and, once parsed,
// its lists and disk sizes.
func checkCloudConfigLimits(text []byte, cc *CloudConfig) error {
	if len(text) > MaxCloudConfigBytes {
		return tooBig("cloud_config", len(text), MaxCloudConfigBytes, "bytes")
	}
	if cc == nil {
		return nil
	}
	for _, l := range []struct {
		field string
		n     int
	}{{"azs", len(cc.AZs)}, {"vm_types", len(cc.VMTypes)}, {"disk_types", len(cc.DiskTypes)}, {"networks", len(cc.Networks)}} {
		if l.n > MaxCloudConfigEntries {
			return tooBig(l.field, l.n, MaxCloudConfigEntries, "entries")
		}
	}
	for i, n := range cc.Networks {
		if len(n.Subnets) > MaxCloudConfigEntries {
			return tooBig(fmt.Sprintf("networks[%d].subnets", i), len(n.Subnets), MaxCloudConfigEntries, "entries")
		}
	}
	for i, dt := range cc.DiskTypes {
		if err := checkDiskSize(fmt.Sprintf("disk_types[%d].disk_size", i), dt.DiskSize); err != nil {
			return err
		}
	}
	return nil
}

// checkManifestLimits checks a manifest's size and, once parsed, its
// instance groups and instances.
func checkManifestLimits(text []byte, m *Manifest) error {
	if len(text) > MaxManifestBytes {
		return tooBig("manifest", len(text), MaxManifestBytes, "bytes")
	}
	if m == nil {
		return nil
	}
	if len(m.InstanceGroups) > MaxInstanceGroups {
		return tooBig("instance_groups", len(m.InstanceGroups), MaxInstanceGroups, "entries")
	}
	for i, g := range m.InstanceGroups {
		if g.Instances > MaxInstancesPerGroup {
			return tooBig(fmt.Sprintf("instance_groups[%d].instances", i), g.Instances, MaxInstancesPerGroup, "instances")
		}
	}
	return nil
}

// checkStemcellManifestLimits checks stemcell.MF's size.
func checkStemcellManifestLimits(mf []byte) error {
	if len(mf) > MaxStemcellManifestBytes {
		return tooBig("stemcell.MF", len(mf), MaxStemcellManifestBytes, "bytes")
	}
	return nil
}

// checkQueryValue checks one query parameter's value.
func checkQueryValue(field, v string) error {
	switch {
	case len(v) > MaxQueryValueLen:
		return tooBig(field, len(v), MaxQueryValueLen, "bytes")
	case !utf8.ValidString(v):
		return badField(field, "%q is not valid UTF-8", v)
	}
	return nil
}

// checkQuery checks every value of a request's query.
func checkQuery(r *http.Request) error {
	for k, vs := range r.URL.Query() {
		if err := checkQueryValue(k, k); err != nil {
			return err
		}
		for _, v := range vs {
			if err := checkQueryValue(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// tarballTooBig is a stemcell tarball past a bound: 422, naming location.
func tarballTooBig(location, what string, got, limit int64) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Field: "location",
		Message: fmt.Sprintf("stemcell %s: %s is %d; at most %d", location, what, got, limit)}
}

// checkPath checks a file path given in a request.
func checkPath(field, p string) error {
	switch {
	case len(p) > MaxPathLen:
		return tooBig(field, len(p), MaxPathLen, "bytes")
	case !utf8.ValidString(p):
		return badField(field, "%q is not valid UTF-8", p)
	}
	return nil
}

package fakeiaas

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/cpilab/cpilab/cpiv2"
)

// Limits on what fakeiaas accepts from its callers. Anything beyond one is
// refused with ErrTooLarge (CloudError for a CPI, HTTP 422; a request body
// beyond MaxRequestBytes is HTTP 413) naming the limit, before anything is
// changed. They are far above what a CPI certification or a simulation
// needs and far below what would exhaust the machine running fakeiaas.
const (
	// MaxDiskSizeMiB is the largest disk create_disk, resize_disk and
	// update_disk accept: 1 TiB. Disks are sparse files, so the limit is
	// about what the host's file system can represent, not about space.
	MaxDiskSizeMiB = 1 << 20
	// MaxStemcells, MaxVMs, MaxDisks and MaxSnapshots bound how many of
	// each the cloud holds at once (a create beyond is refused).
	MaxStemcells = 10_000
	MaxVMs       = 100_000
	MaxDisks     = 500_000
	MaxSnapshots = 500_000
	// MaxNameBytes bounds strings that name things: agent_id, stemcell
	// image paths, registry instance ids, fault rule ids and targets.
	MaxNameBytes = 1024
	// MaxMetadataEntries, MaxMetadataKeyBytes and MaxMetadataValueBytes
	// bound set_vm_metadata, set_disk_metadata and snapshot_disk metadata.
	MaxMetadataEntries    = 256
	MaxMetadataKeyBytes   = 256
	MaxMetadataValueBytes = 16 << 10
	// MaxDocumentBytes bounds every JSON document a caller hands over as is:
	// cloud_properties, networks, env, user-data, a stemcell image and its
	// tags, registry settings.
	MaxDocumentBytes = 1 << 20
	// MaxRequestBytes bounds an HTTP request body (the API, the registry,
	// fault rules).
	MaxRequestBytes = 4 << 20
	// MaxAnswerBytes bounds an answer the Client reads (the API, the
	// registry, the metadata service); a longer one is an error naming
	// the endpoint and the cap (internal/httpread).
	MaxAnswerBytes = 16 << 20
	// MaxFaultRules bounds how many fault rules are active at once.
	MaxFaultRules = 10_000
	// MaxFaultDelay bounds a fault rule's latency or Retry-After.
	MaxFaultDelay = time.Hour
)

func tooLarge(format string, args ...any) *Error {
	return newErr(CodeTooLarge, cpiv2.TypeCloudError, format, args...)
}

// checkSize refuses a disk size outside (0, MaxDiskSizeMiB].
func checkSize(op string, sizeMiB int) *Error {
	if sizeMiB <= 0 {
		return invalid("%s: size %d MiB must be positive", op, sizeMiB)
	}
	if sizeMiB > MaxDiskSizeMiB {
		return tooLarge("%s: size %d MiB exceeds fakeiaas's limit of %d MiB (MaxDiskSizeMiB, 1 TiB)", op, sizeMiB, MaxDiskSizeMiB)
	}
	return nil
}

// checkName refuses a name longer than MaxNameBytes or not valid UTF-8.
func checkName(what, s string) *Error {
	if len(s) > MaxNameBytes {
		return tooLarge("%s is %d bytes long; the limit is %d (MaxNameBytes)", what, len(s), MaxNameBytes)
	}
	if !utf8.ValidString(s) {
		return invalid("%s is not valid UTF-8", what)
	}
	return nil
}

// checkDoc refuses a JSON document larger than MaxDocumentBytes.
func checkDoc(what string, raw json.RawMessage) *Error {
	if len(raw) > MaxDocumentBytes {
		return tooLarge("%s is %d bytes; the limit is %d (MaxDocumentBytes)", what, len(raw), MaxDocumentBytes)
	}
	return nil
}

// checkMetadata refuses metadata beyond the MaxMetadata* limits.
func checkMetadata(op string, m cpiv2.Metadata) *Error {
	if len(m) > MaxMetadataEntries {
		return tooLarge("%s: %d metadata entries; the limit is %d (MaxMetadataEntries)", op, len(m), MaxMetadataEntries)
	}
	for k, v := range m {
		if len(k) > MaxMetadataKeyBytes {
			return tooLarge("%s: metadata key %.40q… is %d bytes; the limit is %d (MaxMetadataKeyBytes)", op, k, len(k), MaxMetadataKeyBytes)
		}
		if len(v) > MaxMetadataValueBytes {
			return tooLarge("%s: metadata value of %q is %d bytes; the limit is %d (MaxMetadataValueBytes)", op, k, len(v), MaxMetadataValueBytes)
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return invalid("%s: metadata entry %q is not valid UTF-8", op, k)
		}
	}
	return nil
}

// checkCount refuses a create when the cloud already holds limit objects.
func checkCount(op, what string, n, limit int, name string) *Error {
	if n >= limit {
		return tooLarge("%s: the cloud holds %d %s, its limit (%s)", op, n, what, name)
	}
	return nil
}

// checkFaultRule refuses a fault rule beyond the limits.
func checkFaultRule(r Rule) error {
	for _, s := range []struct{ what, v string }{{"fault rule id", r.ID}, {"fault rule target", r.Target}, {"fault rule message", r.Effect.Message}} {
		if e := checkName(s.what, s.v); e != nil {
			return e
		}
	}
	if r.Effect.Delay > MaxFaultDelay {
		return tooLarge("fault rule %s: delay %v exceeds the limit of %v (MaxFaultDelay)", r.ID, r.Effect.Delay, MaxFaultDelay)
	}
	return nil
}

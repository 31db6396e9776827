package cpiv2

import (
	"encoding/json"
	"fmt"
)

// CIDKind names what a CID identifies; it exists only as a type parameter,
// so a VM CID cannot be passed where a disk CID is expected.
type CIDKind interface{ cidName() string }

// The kinds of CID the CPI API uses.
type (
	StemcellKind struct{}
	VMKind       struct{}
	DiskKind     struct{}
	SnapshotKind struct{}
)

func (StemcellKind) cidName() string { return "stemcell_cid" }
func (VMKind) cidName() string       { return "vm_cid" }
func (DiskKind) cidName() string     { return "disk_cid" }
func (SnapshotKind) cidName() string { return "snapshot_cid" }

// CID is a cloud identifier as the CPI returns it: an opaque, non-empty
// string. The zero CID is "no CID" (JSON null) and is never valid input.
type CID[K CIDKind] struct{ value string }

// The CID types of the CPI methods.
type (
	StemcellCID = CID[StemcellKind]
	VMCID       = CID[VMKind]
	DiskCID     = CID[DiskKind]
	SnapshotCID = CID[SnapshotKind]
)

// ErrEmptyCID is returned (wrapped) for an empty CID string.
var ErrEmptyCID = fmt.Errorf("cpiv2: empty CID")

// ParseCID returns the CID with the given value, or an error for "".
func ParseCID[K CIDKind](s string) (CID[K], error) {
	if s == "" {
		var k K
		return CID[K]{}, fmt.Errorf("%s: %w", k.cidName(), ErrEmptyCID)
	}
	return CID[K]{value: s}, nil
}

// MustCID is ParseCID for values known to be valid (tests, fixtures); it
// panics on "".
func MustCID[K CIDKind](s string) CID[K] {
	c, err := ParseCID[K](s)
	if err != nil {
		panic(err)
	}
	return c
}

// NewVMCID is ParseCID for a VM CID.
func NewVMCID(s string) (VMCID, error) { return ParseCID[VMKind](s) }

// NewDiskCID is ParseCID for a disk CID.
func NewDiskCID(s string) (DiskCID, error) { return ParseCID[DiskKind](s) }

// NewStemcellCID is ParseCID for a stemcell CID.
func NewStemcellCID(s string) (StemcellCID, error) { return ParseCID[StemcellKind](s) }

// NewSnapshotCID is ParseCID for a snapshot CID.
func NewSnapshotCID(s string) (SnapshotCID, error) { return ParseCID[SnapshotKind](s) }

// String is the CID's value ("" for the zero CID).
func (c CID[K]) String() string { return c.value }

// IsZero reports whether c is the zero ("no CID") value.
func (c CID[K]) IsZero() bool { return c.value == "" }

// MarshalJSON writes the CID as a JSON string, and the zero CID as null.
func (c CID[K]) MarshalJSON() ([]byte, error) {
	if c.value == "" {
		return []byte("null"), nil
	}
	return json.Marshal(c.value)
}

// UnmarshalJSON accepts a non-empty JSON string. null leaves the zero CID;
// "" and any other JSON type are errors naming the CID kind.
func (c *CID[K]) UnmarshalJSON(data []byte) error {
	var k K
	if string(data) == "null" {
		*c = CID[K]{}
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%s must be a string, got %s", k.cidName(), excerpt(data))
	}
	v, err := ParseCID[K](s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// excerpt shortens b for an error message.
func excerpt(b []byte) string {
	const max = 120
	if len(b) <= max {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q… (%d bytes)", b[:max], len(b))
}

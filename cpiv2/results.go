package cpiv2

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Result decoding on the caller side. Each function checks the shape the
// method has at the negotiated api_version and reports anything else as an
// *InvalidResponseError of kind ErrBadResult (or ErrNoDiskHint).

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// decodeInfoResult: {"stemcell_formats": [string…], "api_version": positive
// integer}; both keys may be absent.
func decodeInfoResult(raw json.RawMessage) (Info, error) {
	const want = `an object {"stemcell_formats": [strings], "api_version": positive integer}`
	var m map[string]json.RawMessage
	if isNull(raw) || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		return Info{}, resultError(MethodInfo, raw, want, nil)
	}
	var info Info
	if f, ok := m["stemcell_formats"]; ok && !isNull(f) {
		if f[0] != '[' || json.Unmarshal(f, &info.StemcellFormats) != nil {
			return Info{}, resultError(MethodInfo, raw, want+" (stemcell_formats)", nil)
		}
	}
	if v, ok := m["api_version"]; ok && !isNull(v) {
		n, err := strictInt(v)
		if err != nil || n < 1 {
			return Info{}, resultError(MethodInfo, raw, want+" (api_version)", err)
		}
		info.APIVersion = n
	}
	return info, nil
}

// decodeCIDResult: a non-empty string; null too when nullable.
func decodeCIDResult[K CIDKind](method string, raw json.RawMessage, nullable bool) (CID[K], error) {
	var k K
	if isNull(raw) {
		if nullable {
			return CID[K]{}, nil
		}
		return CID[K]{}, resultError(method, raw, "a non-empty "+k.cidName()+" string", nil)
	}
	var cid CID[K]
	if raw[0] != '"' {
		return CID[K]{}, resultError(method, raw, "a non-empty "+k.cidName()+" string", nil)
	}
	if err := json.Unmarshal(raw, &cid); err != nil {
		return CID[K]{}, resultError(method, raw, "a non-empty "+k.cidName()+" string", err)
	}
	return cid, nil
}

func decodeBoolResult(method string, raw json.RawMessage) (bool, error) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, resultError(method, raw, "a boolean", nil)
}

func decodeCloudPropsResult(raw json.RawMessage) (CloudProps, error) {
	var p CloudProps
	if isNull(raw) || raw[0] != '{' {
		return CloudProps{}, resultError(MethodCalculateVMCloudProperties, raw, "a cloud_properties hash", nil)
	}
	if err := p.UnmarshalJSON(raw); err != nil {
		return CloudProps{}, resultError(MethodCalculateVMCloudProperties, raw, "a cloud_properties hash", err)
	}
	return p, nil
}

// decodeCreateVMResult: a vm_cid string at 1; [vm_cid, networks] at 2+.
func decodeCreateVMResult(raw json.RawMessage, v int) (CreateVMResult, error) {
	if v < 2 {
		cid, err := decodeCIDResult[VMKind](MethodCreateVM, raw, false)
		return CreateVMResult{VMCID: cid}, err
	}
	const want = "[vm_cid, networks] (api_version ≥ 2)"
	var pair []json.RawMessage
	if isNull(raw) || raw[0] != '[' || json.Unmarshal(raw, &pair) != nil || len(pair) != 2 {
		return CreateVMResult{}, resultError(MethodCreateVM, raw, want, nil)
	}
	cid, err := decodeCIDResult[VMKind](MethodCreateVM, pair[0], false)
	if err != nil {
		return CreateVMResult{}, resultError(MethodCreateVM, raw, want, err)
	}
	nets := Networks{}
	if isNull(pair[1]) || pair[1][0] != '{' {
		return CreateVMResult{}, resultError(MethodCreateVM, raw, want+" with networks a hash", nil)
	}
	if err := json.Unmarshal(pair[1], &nets); err != nil {
		return CreateVMResult{}, resultError(MethodCreateVM, raw, want+" with networks a hash of networks", err)
	}
	return CreateVMResult{VMCID: cid, Networks: nets}, nil
}

// decodeAttachDiskResult: ignored at 1 (the Director does not look at it); a
// non-empty disk hint at 2+.
func decodeAttachDiskResult(raw json.RawMessage, v int) (DiskHint, error) {
	if v < 2 {
		return DiskHint{}, nil
	}
	if isNull(raw) {
		return DiskHint{}, &InvalidResponseError{Kind: ErrNoDiskHint, Method: MethodAttachDisk, Key: "result",
			Detail: "attach_disk returned null at api_version ≥ 2", Excerpt: excerpt(raw)}
	}
	var h DiskHint
	if err := h.UnmarshalJSON(raw); err != nil {
		return DiskHint{}, resultError(MethodAttachDisk, raw, "a disk hint (a string or a hash of strings)", err)
	}
	if h.IsZero() {
		return DiskHint{}, &InvalidResponseError{Kind: ErrNoDiskHint, Method: MethodAttachDisk, Key: "result",
			Detail: "attach_disk returned an empty disk hint at api_version ≥ 2", Excerpt: excerpt(raw)}
	}
	return h, nil
}

// decodeGetDisksResult: an array (never null) of disk_cid strings.
func decodeGetDisksResult(raw json.RawMessage) ([]DiskCID, error) {
	const want = "an array of disk_cid strings (never null)"
	var items []json.RawMessage
	if isNull(raw) || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, resultError(MethodGetDisks, raw, want, nil)
	}
	out := make([]DiskCID, 0, len(items))
	for i, it := range items {
		cid, err := decodeCIDResult[DiskKind](MethodGetDisks, it, false)
		if err != nil {
			return nil, resultError(MethodGetDisks, raw, fmt.Sprintf("%s (item %d)", want, i), errors.Unwrap(err))
		}
		out = append(out, cid)
	}
	return out, nil
}

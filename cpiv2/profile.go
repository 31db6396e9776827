package cpiv2

import (
	"errors"
	"fmt"
	"strings"
)

// Profile is how one kind of caller speaks CPI: what it sends
// on info and on later calls, how it negotiates the api_version, and whether
// a CPI's exit status matters. The four upstream callers are the Profile*
// variables; a Profile is plain data so that reports can print it.
//
// Result shapes follow the negotiated api_version alone: create_vm returns a
// vm_cid at 1 and [vm_cid, networks] at 2 and above; attach_disk's result is
// ignored at 1 and must be a non-empty disk hint at 2 and above (else
// ErrNoDiskHint); create_stemcell sends env only at 3; update_disk is refused
// below 2 without any request being sent.
type Profile struct {
	// Name is the profile's name as ParseProfile accepts it.
	Name string
	// MaxAPIVersion is the highest api_version the caller speaks.
	MaxAPIVersion int
	// Negotiates reports whether the caller calls info to learn the CPI's
	// api_version before its other calls. A caller that does not negotiate
	// speaks api_version 1.
	Negotiates bool
	// SendsAPIVersion reports whether calls after info carry api_version
	// (the negotiated one).
	SendsAPIVersion bool
	// InfoAPIVersion is the api_version sent on info itself; 0 sends none.
	InfoAPIVersion int
	// MinCPIAPIVersion is the lowest api_version a CPI must report in info;
	// 0 accepts any CPI (one that reports none, or NotImplemented on info,
	// speaks 1). Below it the caller refuses the CPI with NotSupported.
	MinCPIAPIVersion int
	// AnyInfoErrorMeansV1 makes every info error mean "a CPI of api_version
	// 1", as the v2-era Director did (cloud_factory.rb at cloudfoundry/bosh
	// e98be8082d rescued any error from info). False (every built-in
	// profile): only NotImplemented means version 1; any other info error
	// fails the negotiation. The director's upstream profile sets it for
	// director-v2.
	AnyInfoErrorMeansV1 bool
	// SendsStemcellAPIVersion reports whether the caller sends
	// context.vm.stemcell.api_version (from StemcellAPIVersionFrom(ctx), when
	// non-zero).
	SendsStemcellAPIVersion bool
	// ExitStatusMatters reports whether a non-zero exit fails the call
	// (ErrNonZeroExit) even when stdout holds a valid response.
	ExitStatusMatters bool
}

// The four upstream caller profiles.
var (
	// ProfileDirectorV1 is a Director from before CPI API v2: it never sends
	// api_version (nor the stemcell's) and speaks version 1 to every CPI.
	ProfileDirectorV1 = Profile{Name: "director-v1", MaxAPIVersion: 1}
	// ProfileDirectorV2 is a Director speaking at most version 2: info
	// without api_version, then min(2, CPI's) on every call; a CPI that
	// reports no api_version (or NotImplemented on info) gets version 1.
	ProfileDirectorV2 = Profile{Name: "director-v2", MaxAPIVersion: 2, Negotiates: true,
		SendsAPIVersion: true, SendsStemcellAPIVersion: true}
	// ProfileDirectorCurrent is the current Director: version 3 at most, info
	// without api_version, and it refuses a CPI that reports no api_version
	// of 2 or more ("CPI must report api_version via info", NotSupported).
	ProfileDirectorCurrent = Profile{Name: "director-current", MaxAPIVersion: 3, Negotiates: true,
		SendsAPIVersion: true, MinCPIAPIVersion: 2, SendsStemcellAPIVersion: true}
	// ProfileCLI is the bosh CLI (create-env): version 2 at most, info sends
	// api_version 1, and a non-zero exit status fails the call.
	ProfileCLI = Profile{Name: "cli", MaxAPIVersion: 2, Negotiates: true, SendsAPIVersion: true,
		InfoAPIVersion: 1, SendsStemcellAPIVersion: true, ExitStatusMatters: true}
)

// Profiles returns the four caller profiles, oldest Director first.
func Profiles() []Profile {
	return []Profile{ProfileDirectorV1, ProfileDirectorV2, ProfileDirectorCurrent, ProfileCLI}
}

// ParseProfile returns the profile with the given name.
func ParseProfile(name string) (Profile, error) {
	var names []string
	for _, p := range Profiles() {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Profile{}, fmt.Errorf("cpiv2: unknown caller profile %q (known: %s)", name, strings.Join(names, ", "))
}

// String returns the profile's name.
func (p Profile) String() string { return p.Name }

// orDefault returns p, or ProfileDirectorCurrent for the zero Profile.
func (p Profile) orDefault() Profile {
	if p.Name == "" {
		return ProfileDirectorCurrent
	}
	return p
}

// ErrRefused matches every *RefusalError: the caller profile refused to make
// a call, and nothing was sent to the CPI.
var ErrRefused = errors.New("refused by the caller profile")

// RefusalError is a call the caller profile would not make: a CPI it does
// not accept, or a method the negotiated api_version does not have. No
// request was sent for the refused call. errors.Is(err, ErrRefused) holds,
// and so does errors.Is(err, ErrNotSupported) (Err is a NotSupported *Error,
// as the Director raises).
type RefusalError struct {
	Profile string
	Method  string
	// APIVersion is the api_version the call would have used (for a refused
	// CPI: the one it reported, 0 for none).
	APIVersion int
	Err        *Error
}

// Error names the profile, the method and the reason.
func (e *RefusalError) Error() string {
	return fmt.Sprintf("%s caller refuses %s at api_version %d: %v", e.Profile, e.Method, e.APIVersion, e.Err)
}

// Unwrap returns the NotSupported error.
func (e *RefusalError) Unwrap() error { return e.Err }

// Is matches ErrRefused.
func (e *RefusalError) Is(target error) bool { return target == ErrRefused }

// Negotiate returns the api_version the profile speaks to a CPI whose info
// call gave info and infoErr: min(MaxAPIVersion, the CPI's api_version),
// where a CPI reporting none, or answering info with NotImplemented, speaks 1.
// A CPI below MinCPIAPIVersion is refused with a *RefusalError; any other
// info error is returned as it is. A profile that does not negotiate speaks 1.
func (p Profile) Negotiate(info Info, infoErr error) (int, error) {
	if !p.Negotiates {
		return 1, nil
	}
	cpi := info.APIVersion
	if infoErr != nil {
		if !errors.Is(infoErr, ErrNotImplemented) && !p.AnyInfoErrorMeansV1 {
			return 0, infoErr
		}
		cpi = 0
	}
	if p.MinCPIAPIVersion > 0 {
		if cpi == 0 {
			return 0, &RefusalError{Profile: p.Name, Method: MethodInfo,
				Err: NewError(TypeNotSupported, "CPI must report api_version via info")}
		}
		if cpi < p.MinCPIAPIVersion {
			return 0, &RefusalError{Profile: p.Name, Method: MethodInfo, APIVersion: cpi,
				Err: NewError(TypeNotSupported, "CPI api_version %d is not supported; %s needs at least %d", cpi, p.Name, p.MinCPIAPIVersion)}
		}
	}
	if cpi == 0 {
		cpi = 1
	}
	return min(cpi, p.MaxAPIVersion), nil
}

// CanSpeak reports whether the profile ever speaks api_version v: between 1
// (or MinCPIAPIVersion) and MaxAPIVersion.
func (p Profile) CanSpeak(v int) bool {
	return v >= max(1, p.MinCPIAPIVersion) && v <= p.MaxAPIVersion
}

// MinAPIVersion returns the lowest api_version a method exists at: 2 for
// update_disk, 1 for the others.
func MinAPIVersion(method string) int {
	if method == MethodUpdateDisk {
		return 2
	}
	return 1
}

// refuseMethod returns a *RefusalError when method does not exist at the
// negotiated api_version v.
func (p Profile) refuseMethod(method string, v int) error {
	if min := MinAPIVersion(method); v < min {
		return &RefusalError{Profile: p.Name, Method: method, APIVersion: v,
			Err: NewError(TypeNotSupported, "%s needs api_version %d or later; negotiated %d", method, min, v)}
	}
	return nil
}

package cpisuite

import (
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
)

// negotiate returns the api_version caller p speaks to a CPI whose info
// reported cpiMax (0: none, a v1 CPI), or an error wrapping ErrRefused when
// p refuses the CPI (version.refused). It mirrors cpiv2's caller profiles; the
// suites call the CPI at the wire level themselves so that they can judge
// every byte of every response.
func negotiate(p cpiv2.Profile, cpiMax int) (int, error) {
	if !p.Negotiates {
		return 1, nil
	}
	if cpiMax == 0 {
		cpiMax = 1
	}
	if cpiMax < p.MinCPIAPIVersion {
		return 0, fmt.Errorf("%w: the %s caller requires api_version ≥ %d, the CPI's info reports %d",
			ErrRefused, p.Name, p.MinCPIAPIVersion, cpiMax)
	}
	return min(cpiMax, p.MaxAPIVersion), nil
}

// hasRegistry reports whether deployments of caller p have a registry: the
// current Director has none (docs/contracts.md, the reference table).
func hasRegistry(p cpiv2.Profile) bool {
	return p.Name != cpiv2.ProfileDirectorCurrent.Name
}

// Package cpiv2 is the BOSH CPI wire protocol for api_version 1, 2 and 3:
// typed requests and results per method, typed CIDs and disk hints, the
// error catalog, version negotiation for each caller profile, an exec runner
// that calls a CPI binary exactly as the Director does, and a dispatcher for
// writing CPIs in Go. Everything else in cpilab speaks CPI through it.
//
// Calling a CPI binary as the current Director would:
//
//	r := cpiv2.NewRunner(cpiv2.RunnerConfig{
//		Command: []string{"bin/fakeiaas-cpi", "-configPath", "cpi.json"},
//		Profile: cpiv2.ProfileDirectorCurrent,
//	})
//	ctx = cpiv2.WithStemcellAPIVersion(ctx, 2)
//	res, err := r.CreateVM(ctx, args) // negotiates with info first
//	if errors.Is(err, cpiv2.ErrVMCreationFailed) { … }
//
// The contract clauses referred to as "CONTRACTS §N" are those of the
// project's CONTRACTS.md.
package cpiv2

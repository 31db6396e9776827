// Package cpiv2 is the BOSH CPI wire protocol for api_version 1, 2 and 3. It
// holds typed requests and results per method, typed CIDs and disk hints,
// the error catalog, version negotiation for each caller profile, an exec
// runner that calls a CPI binary exactly as the Director does, and a
// dispatcher for writing CPIs in Go. Everything else in cpilab speaks CPI
// through it.
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
// Writing a CPI in Go: implement Core (and any of the optional capability
// interfaces, such as Snapshotter or DiskResizer), then serve one request
// per process:
//
//	func main() { cpiv2.Main(myCPI{}, cpiv2.DispatcherConfig{MaxAPIVersion: 3}) }
//
// The same implementation can be called in process, over the same wire
// bytes and with the same strict decoding, without a process:
//
//	l := cpiv2.NewLoopback(myCPI{}, cpiv2.LoopbackConfig{Profile: cpiv2.ProfileCLI})
//
// Failures keep their identity: a CPI's error object is a *Error (match it
// with errors.Is against ErrVMNotFound and the other sentinels), a response
// that breaks the protocol is an *InvalidResponseError whose Kind (ErrNotJSON,
// ErrMissingKey, ErrCPITimeout, …) errors.Is matches, and a call the caller
// profile will not make is a *RefusalError (ErrRefused).
//
// RunProcess is the one way cpilab runs a CPI process (Runner and the
// suites use it): output cap, time-out, process-group kill, a bounded wait
// for pipes a CPI's leftover children hold, and a one-line Outcome for
// every way the process ends. CheckJSON is the strictness every reader of
// CPI output applies: no duplicate keys, valid UTF-8.
package cpiv2

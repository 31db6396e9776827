package main

import (
	"flag"
	"strconv"

	"github.com/cpilab/cpilab/suites/cpisuite"
)

// The flags that map onto cpisuite.Config's strictness for CI: --strict
// (Config.Strict) and --require-api-version (Config.RequireAPIVersion).

func registerCertifyExtra(fs *flag.FlagSet, f *certifyFlags) {
	fs.IntVar(&f.requireAPIVersion, "require-api-version", 0, "fail a CPI whose info reports an api_version below `N` (clause version.required); 0 requires nothing")
}

// applyCertifyExtra sets them on cfg.
func applyCertifyExtra(cfg *cpisuite.Config, f certifyFlags) {
	cfg.Strict = f.common.Strict
	cfg.RequireAPIVersion = f.requireAPIVersion
}

// rerunExtra are those flags in a rerun command (--strict is kept by
// rerunCommand itself).
func rerunExtra(f certifyFlags) []string {
	if f.requireAPIVersion == 0 {
		return nil
	}
	return []string{"--require-api-version", strconv.Itoa(f.requireAPIVersion)}
}

package main

import (
	"flag"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
)

// Ginkgo's own flags pass through certify as --ginkgo.NAME[=VALUE], the way
// csi-sanity passes them: Ginkgo registers them on the process's flag set
// with the "ginkgo." prefix, and the suites read them from there.

// ginkgoOwnedByCertify are Ginkgo flags certify has its own flag for.
var ginkgoOwnedByCertify = map[string]string{
	"label-filter": "--label-filter", "focus": "--focus", "skip": "--skip", "fail-fast": "--fail-fast",
	"junit-report": "--junit-report", "v": "-v", "vv": "-v", "no-color": "--no-color", "dry-run": "--list",
	"succinct": "--quiet", "silence-skips": "--quiet",
}

// splitGinkgoArgs separates the --ginkgo.NAME[=VALUE] arguments from
// certify's own, each as one "--ginkgo.NAME=VALUE" word (a switch without
// a value gets "=true"; a flag that takes a value takes the next argument).
func splitGinkgoArgs(args []string) (own, ginkgoArgs []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			own = append(own, args[i:]...)
			break
		}
		name, ok := strings.CutPrefix(strings.TrimPrefix(a, "-"), "-ginkgo.")
		if !ok {
			name, ok = strings.CutPrefix(a, "-ginkgo.")
		}
		if !ok {
			own = append(own, a)
			continue
		}
		if strings.Contains(name, "=") {
			ginkgoArgs = append(ginkgoArgs, "--ginkgo."+name)
			continue
		}
		f := flag.CommandLine.Lookup("ginkgo." + name)
		if bf, isBool := boolFlag(f); isBool && bf {
			ginkgoArgs = append(ginkgoArgs, "--ginkgo."+name+"=true")
			continue
		}
		if i+1 < len(args) && (f != nil || !strings.HasPrefix(args[i+1], "-")) {
			// A flag Ginkgo does not have (--ginkgo.procs 2, a flag of the
			// ginkgo CLI) takes its value too, so that passToGinkgo names
			// it instead of the value being a stray argument.
			i++
			ginkgoArgs = append(ginkgoArgs, "--ginkgo."+name+"="+args[i])
			continue
		}
		ginkgoArgs = append(ginkgoArgs, "--ginkgo."+name) // reported by passToGinkgo
	}
	return own, ginkgoArgs
}

func boolFlag(f *flag.Flag) (bool, bool) {
	if f == nil {
		return false, false
	}
	bf, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && bf.IsBoolFlag(), ok
}

// passToGinkgo sets the pass-through flags on Ginkgo's flags (certify's
// own --skip and --fail-fast go through suites.RunOptions). A Ginkgo flag that does not exist, lacks
// its value, or duplicates one of certify's is a usage error.
func passToGinkgo(fs *flag.FlagSet, f certifyFlags) error {
	for _, g := range f.ginkgo {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(g, "--ginkgo."), "=")
		if own, ok := ginkgoOwnedByCertify[name]; ok {
			return usageError(fs, "--ginkgo.%s: use certify's own %s", name, own)
		}
		if name == "procs" || name == "p" || name == "nodes" {
			return usageError(fs, "--ginkgo.%s: a flag of the ginkgo CLI, not of the suites; certify already runs its suites in several worker processes", name)
		}
		if strings.HasPrefix(name, "parallel.") {
			return usageError(fs, "--ginkgo.%s: certify runs its suites in one process", name)
		}
		gf := flag.CommandLine.Lookup("ginkgo." + name)
		if gf == nil {
			return usageError(fs, "--ginkgo.%s: Ginkgo has no such flag (see Ginkgo's documentation, e.g. --ginkgo.randomize-all, --ginkgo.seed N)", name)
		}
		if !hasValue {
			return usageError(fs, "--ginkgo.%s: needs a value", name)
		}
		if err := gf.Value.Set(value); err != nil {
			return usageError(fs, "--ginkgo.%s=%s: %v", name, value, err)
		}
	}
	return nil
}

// ginkgoOutputOnly reports whether a pass-through flag changes only what
// is reported, not what a spec does (a rerun command leaves it out).
func ginkgoOutputOnly(arg string) bool {
	name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--ginkgo."), "=")
	return strings.HasSuffix(name, "-report") || strings.HasPrefix(name, "show-") || strings.Contains(name, "progress") ||
		name == "github-output" || name == "force-newlines" || name == "output-dir"
}

func ginkgoSuiteConfig() types.SuiteConfig {
	s, _ := ginkgo.GinkgoConfiguration()
	return s
}

func ginkgoReporterConfig() types.ReporterConfig {
	_, r := ginkgo.GinkgoConfiguration()
	return r
}

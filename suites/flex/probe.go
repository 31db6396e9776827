package flex

import (
	"os"
	"path/filepath"
	"strings"
)

// Probed is one driver the prober found.
type Probed struct {
	Name       string // vendor/driver
	Executable string
}

// Probe lists the drivers in pluginDir as kubelet's prober
// (pkg/volume/flexvolume/probe.go) finds them: directories whose name does
// not start with ".", each holding an executable named after the text
// after its last "~".
func Probe(pluginDir string) ([]Probed, error) {
	ents, err := os.ReadDir(pluginDir)
	if err != nil {
		return nil, err
	}
	var out []Probed
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		exe := e.Name()
		if i := strings.LastIndex(exe, "~"); i >= 0 {
			exe = exe[i+1:]
		}
		p := filepath.Join(pluginDir, e.Name(), exe)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		out = append(out, Probed{Name: strings.ReplaceAll(e.Name(), "~", "/"), Executable: p})
	}
	return out, nil
}

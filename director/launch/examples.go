package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	directorfixtures "github.com/cpilab/cpilab/fixtures/director"
)

// The example files Run writes to DataDir/examples, so that the next steps
// it prints run as printed: a cloud config with the disk_type "dynamic", a
// stemcell directory for the reference CPI, and a deployment "example" of
// two instances.
const (
	exampleCloudConfig = `azs:
- name: z1
  cloud_properties: {}
vm_types:
- name: default
  cloud_properties: {}
disk_types:
- name: dynamic
  disk_size: 1024
  cloud_properties: {}
networks:
- name: default
  type: dynamic
  subnets:
  - azs: [z1]
    cloud_properties: {}
`
	exampleManifest = `name: example
stemcells:
- alias: default
  os: ubuntu-jammy
  version: latest
instance_groups:
- name: worker
  instances: 2
  azs: [z1]
  vm_type: default
  stemcell: default
  networks:
  - name: default
  jobs: []
`
)

// writeExamples writes the example files under dir and returns dir.
func writeExamples(dataDir string) (string, error) {
	dir := filepath.Join(dataDir, "examples")
	stemcell := filepath.Join(dir, "stemcell")
	err := errors.Join(directorfixtures.WriteStemcell(stemcell),
		os.WriteFile(filepath.Join(dir, "cloud-config.yml"), []byte(exampleCloudConfig), 0o644),
		os.WriteFile(filepath.Join(dir, "manifest.yml"), []byte(exampleManifest), 0o644))
	if err != nil {
		return "", fmt.Errorf("launch: example files in %s: %w", dir, err)
	}
	return dir, nil
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeNextSteps prints the commands that upload the example cloud config
// and stemcell, deploy the example deployment and provide a dynamic disk to
// one of its instances, each waiting for its task, ready to paste into a
// shell. user and password are the credentials to show ("" password: the
// operator's own, shown as $PASSWORD).
func writeNextSteps(w io.Writer, info Info, examples, user, password string) {
	cred := user + ":" + password
	if password == "" {
		cred = user + `:$PASSWORD`
	}
	ca := ""
	if info.CACertPath != "" {
		ca = " --cacert " + shQuote(info.CACertPath)
	}
	url := info.URL
	fmt.Fprintf(w, `
Next steps: upload the example cloud config and stemcell, deploy, then provide
a dynamic disk (files in %s; every POST queues a task, which task() waits for):

  d() { curl -sS%s -u "%s" "$@"; }
  task() { t=$(d -o /dev/null -w '%%{redirect_url}' "$@"); until d "$t" | grep -q '"state":"\(done\|error\|cancelled\)"'; do sleep 1; done; d "$t"; echo; }
  task -H 'Content-Type: text/yaml' --data-binary @%s %s/cloud_configs
  task -H 'Content-Type: application/json' -d '{"location": %s}' %s/stemcells
  task -H 'Content-Type: text/yaml' --data-binary @%s %s/deployments
  INSTANCE=$(d %s/deployments/example/instances | sed 's/.*"id":"\([^"]*\)".*/\1/')
  task -H 'Content-Type: application/json' -d "{\"instance_id\": \"$INSTANCE\", \"disk_name\": \"data\", \"disk_pool_name\": \"dynamic\", \"disk_size\": 1024}" %s/dynamic_disks/provide
  d %s/dynamic_disks; echo

`, examples, ca, cred,
		shQuote(filepath.Join(examples, "cloud-config.yml")), url,
		strings.ReplaceAll(jsonString(filepath.Join(examples, "stemcell")), "'", `'\''`), url,
		shQuote(filepath.Join(examples, "manifest.yml")), url,
		url, url, url)
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

package simulator

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
)

// What the cloud holds of each disk the Director made, against what the
// user configured and asked for (part of InvRecords): the whole-state
// comparison of the records check looks at where a disk is and how big;
// this looks at what it was made with and what it carries.
//
//   - create_disk's cloud_properties are the disk type's, with the disk's
//     name added (upstream's dynamic-disk jobs: disk_type.cloud_properties
//     merged with name), for every disk GET /dynamic_disks lists;
//   - create_disk was given a VM for locality (provide: the instance's;
//     create: one of the deployment's in the AZ): the cloud keeps it;
//   - the last OK provide or attach of a name that sent metadata left it on
//     the disk: GET /dynamic_disks lists what was sent, and the cloud's
//     tags hold it (values that are not strings as their JSON text) with
//     the director and deployment tags (upstream's MetadataUpdater).

// diskTypeProps is, per disk type of the cloud config the world gives the
// Director, its cloud_properties as JSON decodes them.
var diskTypeProps = sync.OnceValue(func() map[string]map[string]any {
	var cc struct {
		DiskTypes []struct {
			Name            string         `yaml:"name"`
			CloudProperties map[string]any `yaml:"cloud_properties"`
		} `yaml:"disk_types"`
	}
	if err := yaml.Unmarshal([]byte(worldCloudConfig(FixtureDevices)), &cc); err != nil {
		panic(fmt.Sprintf("simulator: the world's cloud config: %v", err))
	}
	out := map[string]map[string]any{}
	for _, dt := range cc.DiskTypes {
		out[dt.Name] = jsonValue(dt.CloudProperties).(map[string]any)
	}
	return out
})

// jsonValue is v as JSON decodes it (numbers float64, maps map[string]any).
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("simulator: %v", err))
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("simulator: %v", err))
	}
	if out == nil {
		out = map[string]any{}
	}
	return out
}

// checkDiskContents is the records check's comparison of what each disk
// was made with and carries; iaas is the oracle's disks by CID.
func checkDiskContents(v View, iaas map[string]fakeiaas.Disk) []string {
	var bad []string
	ins := instanceByName(v.Instances)
	listed := map[string]int{}
	for i, dd := range v.Disks {
		listed[dd.Name] = i
		d, ok := iaas[dd.CID]
		if !ok {
			continue // the records check says so
		}
		want, known := diskTypeProps()[dd.DiskPoolName]
		if !known {
			bad = append(bad, fmt.Sprintf("%s (%s): GET /dynamic_disks lists disk pool %q, which the cloud config does not have", dd.Name, dd.CID, dd.DiskPoolName))
			continue
		}
		if asked := DiskPoolOf(dd.Name); dd.DiskPoolName != asked {
			bad = append(bad, fmt.Sprintf("%s (%s): GET /dynamic_disks lists disk pool %q; the workload asked for %q", dd.Name, dd.CID, dd.DiskPoolName, asked))
		}
		want = maps.Clone(want)
		want["name"] = dd.Name
		var got any = map[string]any{}
		if len(d.CloudProperties) > 0 {
			if err := json.Unmarshal(d.CloudProperties, &got); err != nil {
				got = string(d.CloudProperties)
			}
		}
		if !reflect.DeepEqual(got, any(want)) {
			bad = append(bad, fmt.Sprintf("%s (%s): create_disk was given cloud_properties %s; disk type %q makes %s",
				dd.Name, dd.CID, d.CloudProperties, dd.DiskPoolName, mustJSON(want)))
		}
		if d.Locality.IsZero() {
			bad = append(bad, fmt.Sprintf("%s (%s): create_disk was given no VM for locality", dd.Name, dd.CID))
		}
		if v.Deployment != "" && (dd.Deployment == nil || *dd.Deployment != v.Deployment) {
			bad = append(bad, fmt.Sprintf("%s (%s): GET /dynamic_disks lists deployment %s; the workload made it in %q", dd.Name, dd.CID, strOrNull(dd.Deployment), v.Deployment))
		}
		if in, ok := ins[dd.InstanceName()]; ok && strOrNull(in.AZ) != strOrNull(dd.AZ) {
			bad = append(bad, fmt.Sprintf("%s (%s): GET /dynamic_disks lists it in AZ %s, attached to instance %s of AZ %s", dd.Name, dd.CID, strOrNull(dd.AZ), dd.InstanceName(), strOrNull(in.AZ)))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.LastOK)) {
		p := v.LastOK[name]
		i, ok := listed[name]
		if p.Meta == 0 || !ok || v.Disks[i].CID != p.CID {
			continue // no metadata sent, or the records check says what is wrong
		}
		dd := v.Disks[i]
		sent := OpMetadata(p.Meta)
		if want := jsonValue(sent); !reflect.DeepEqual(any(dd.Metadata), want) {
			bad = append(bad, fmt.Sprintf("%s (%s): GET /dynamic_disks lists metadata %s, but the last operation on it, an OK provide or attach, sent %s",
				name, dd.CID, mustJSON(dd.Metadata), mustJSON(sent)))
			continue
		}
		tags := map[string]string{"director": DirectorName}
		if dd.Deployment != nil {
			tags["deployment"] = *dd.Deployment
		}
		for k, val := range sent {
			if s, ok := val.(string); ok {
				tags[k] = s
			} else {
				tags[k] = mustJSON(val)
			}
		}
		d := iaas[dd.CID]
		for _, k := range slices.Sorted(maps.Keys(tags)) {
			if got, ok := d.Metadata[k]; !ok || got != tags[k] {
				bad = append(bad, fmt.Sprintf("%s (%s): the cloud's tag %s is %s, but the last operation on it, an OK provide or attach, sent metadata %s (tags %s)",
					name, dd.CID, k, quoteOrAbsent(got, ok), mustJSON(sent), mustJSON(tags)))
				break
			}
		}
	}
	return bad
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func strOrNull(s *string) string {
	if s == nil {
		return "null"
	}
	return strconv.Quote(*s)
}

func quoteOrAbsent(s string, ok bool) string {
	if !ok {
		return "absent"
	}
	return strconv.Quote(s)
}

// checkMetadataNow runs when a provide or attach that sent metadata
// answers OK and no other operation on the name began since or is still
// running: the state is this operation's, so what GET /dynamic_disks lists
// for the name and the cloud's tags must hold what it sent now, not only
// if it is still the name's last operation when the workload is idle.
func (w *World) checkMetadataNow(o Op, cid string) {
	var disks []director.DiskInfo
	if err := w.apiGet("/dynamic_disks", &disks); err != nil {
		return // the Director is down: the idle and quiescent checks decide later
	}
	if cid == "" { // an attach answers no disk CID: the name's disk is the one listed now
		for _, dd := range disks {
			if dd.Name == o.Disk {
				cid = dd.CID
			}
		}
	}
	d, ok := w.oracleDisk(cid)
	if !ok {
		return // the records check says so
	}
	v := View{Disks: disks, Deployment: w.Deployment, LastOK: map[string]Promise{o.Disk: {CID: cid, Meta: o.Meta}}}
	if bad := checkDiskContents(v, map[string]fakeiaas.Disk{cid: d}); len(bad) > 0 {
		w.addViolation(&Violation{Invariant: InvRecords, Phase: AfterStep,
			Err: fmt.Errorf("%s answered OK: %s", o, strings.Join(bad, "; "))})
	}
}

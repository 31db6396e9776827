package director

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

type stemcellArgs struct {
	Manifest  StemcellManifest `json:"manifest"`
	ImagePath string           `json:"image_path"`
}

func (j *job) uploadStemcell(req stemcellArgs) (any, error) {
	d := j.d
	mf := req.Manifest
	key := stemcellKey(mf.Name, mf.Version)
	if err := j.lock(d.cfg.LockTimeout, "lock:stemcells:"+key); err != nil {
		return nil, err
	}
	var sc Stemcell
	ok, err := j.load(store.Stemcells, key, &sc)
	if err != nil {
		return nil, err
	}
	if ok {
		j.debugf("stemcell %s already uploaded as %s", key, sc.CID)
		return map[string]string{"stemcell_cid": sc.CID}, nil
	}
	props := cloudProps(mf.CloudProperties)
	intent, err := j.stemcellIntent(Stemcell{Name: mf.Name, Version: mf.Version, OS: mf.OS, APIVersion: mf.APIVersion,
		CloudProperties: props})
	if err != nil {
		return nil, err
	}
	var cid cpiv2.StemcellCID
	err = j.step("Uploading stemcell", key, func() error {
		var err error
		cid, err = d.cfg.CPI.CreateStemcell(j.cpiCtx(mf.APIVersion), cpiv2.CreateStemcellArgs{
			ImagePath: req.ImagePath, CloudProperties: props})
		return err
	})
	if err != nil {
		_ = j.update(func(tx store.Tx) error { return endIntent(tx, intent) })
		return nil, fmt.Errorf("create_stemcell %s: %w", key, err)
	}
	sc = Stemcell{Name: mf.Name, Version: mf.Version, OS: mf.OS, APIVersion: mf.APIVersion, CID: cid.String(),
		CloudProperties: props}
	return map[string]string{"stemcell_cid": sc.CID},
		j.update(func(tx store.Tx) error {
			if err := endIntent(tx, intent); err != nil {
				return err
			}
			return tx.Put(store.Stemcells, key, sc)
		})
}

type cloudConfigArgs struct {
	YAML string `json:"yaml"`
}

func (j *job) updateCloudConfig(req cloudConfigArgs) (any, error) {
	cc, err := ParseCloudConfig([]byte(req.YAML))
	if err != nil {
		return nil, err
	}
	return nil, j.update(func(tx store.Tx) error { return tx.Put(store.CloudConfigs, "latest", cc) })
}

type deployArgs struct {
	Manifest string `json:"manifest"`
}

// resolveStemcell finds the uploaded stemcell a manifest entry names.
func (d *Director) resolveStemcell(ms ManifestStemcell) (Stemcell, error) {
	all, err := listAll[Stemcell](d.st, store.Stemcells, func(s *Stemcell) bool {
		return (ms.Name == "" || s.Name == ms.Name) && (ms.OS == "" || s.OS == ms.OS) &&
			(ms.Version == "" || ms.Version == "latest" || s.Version == ms.Version)
	})
	if err != nil {
		return Stemcell{}, err
	}
	if len(all) == 0 {
		return Stemcell{}, unprocessable("stemcell %q (name %q, os %q, version %q) is not uploaded", ms.Alias, ms.Name, ms.OS, ms.Version)
	}
	slices.SortFunc(all, func(a, b Stemcell) int { return compareVersions(a.Version, b.Version) })
	return all[len(all)-1], nil
}

func (j *job) deploy(req deployArgs) (any, error) {
	d := j.d
	cc, err := d.cloudConfig()
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest([]byte(req.Manifest), cc)
	if err != nil {
		return nil, err
	}
	if err := j.step("Locking", m.Name, func() error {
		return j.lock(d.cfg.LockTimeout, deploymentLock(m.Name))
	}); err != nil {
		return nil, err
	}
	stemcells := map[string]string{}
	for _, ms := range m.Stemcells {
		sc, err := d.resolveStemcell(ms)
		if err != nil {
			return nil, err
		}
		stemcells[ms.Alias] = stemcellKey(sc.Name, sc.Version)
	}
	if err := j.update(func(tx store.Tx) error {
		return tx.Put(store.Deployments, m.Name, Deployment{Name: m.Name, Manifest: req.Manifest})
	}); err != nil {
		return nil, err
	}
	existing, err := listAll[Instance](d.st, store.Instances, func(i *Instance) bool { return i.Deployment == m.Name })
	if err != nil {
		return nil, err
	}
	byPos := map[string]Instance{}
	for _, in := range existing {
		byPos[fmt.Sprintf("%s/%d", in.Group, in.Index)] = in
	}
	wanted := map[string]bool{}
	for _, g := range m.InstanceGroups {
		var nets []string
		for _, n := range g.Networks {
			nets = append(nets, n.Name)
		}
		for idx := range g.Instances {
			pos := fmt.Sprintf("%s/%d", g.Name, idx)
			wanted[pos] = true
			az := ""
			if len(g.AZs) > 0 {
				az = g.AZs[idx%len(g.AZs)]
			}
			in, ok := byPos[pos]
			if !ok {
				in = Instance{ID: newUUID(d.r), Deployment: m.Name, Group: g.Name, Index: idx, State: InstanceStarted}
			}
			changed := ok && in.VMCID != "" && (in.Stemcell != stemcells[g.Stemcell] || in.VMType != g.VMType ||
				in.AZ != az || !slices.Equal(in.Networks, nets))
			in.AZ, in.VMType, in.Stemcell, in.Networks = az, g.VMType, stemcells[g.Stemcell], nets
			rec := in
			if err := j.update(func(tx store.Tx) error { return tx.Put(store.Instances, in.ID, rec) }); err != nil {
				return nil, err
			}
			if !changed && in.VMCID != "" || in.State == InstanceDetached {
				continue
			}
			release, err := j.lockInstance(in.ID)
			if err != nil {
				return nil, err
			}
			if changed {
				err = j.recreate(&in, false)
			} else {
				err = j.createVM(&in)
			}
			release()
			if err != nil {
				return nil, err
			}
		}
	}
	surplus := slices.Sorted(maps.Keys(byPos)) // a deterministic order
	for _, pos := range surplus {
		in := byPos[pos]
		if wanted[pos] {
			continue
		}
		release, err := j.lockInstance(in.ID)
		if err != nil {
			return nil, err
		}
		_, err = j.deleteVMOf(&in)
		if err == nil {
			err = j.update(func(tx store.Tx) error { return tx.Delete(store.Instances, in.ID) })
		}
		release()
		if err != nil {
			return nil, err
		}
	}
	return map[string]string{"deployment": m.Name}, nil
}

// compareVersions orders stemcell versions numerically by dot-separated
// parts ("621.9" < "621.10"), falling back to string order.
func compareVersions(a, b string) int {
	var pa, pb []int
	parse := func(s string) ([]int, bool) {
		var out []int
		n, digits := 0, false
		for _, r := range s + "." {
			switch {
			case r >= '0' && r <= '9':
				n, digits = n*10+int(r-'0'), true
			case r == '.' && digits:
				out, n, digits = append(out, n), 0, false
			default:
				return nil, false
			}
		}
		return out, true
	}
	pa, okA := parse(a)
	pb, okB := parse(b)
	if !okA || !okB {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	return slices.Compare(pa, pb)
}

type orphanArgs struct {
	// CIDs to delete; empty: every orphan older than OlderThan.
	CIDs      []string      `json:"disk_cids,omitempty"`
	OlderThan time.Duration `json:"older_than,omitempty"`
}

func (j *job) deleteOrphanedDisks(req orphanArgs) (any, error) {
	d := j.d
	now := d.r.Now()
	orphans, err := listAll[OrphanedDisk](d.st, store.OrphanedDisks, func(o *OrphanedDisk) bool {
		if len(req.CIDs) > 0 {
			return slices.Contains(req.CIDs, o.CID)
		}
		return now.Sub(o.OrphanedAt) >= req.OlderThan
	})
	if err != nil {
		return nil, err
	}
	var deleted []string
	for _, o := range orphans {
		intent := Intent{Op: IntentDeleteOrphanedDisk, DiskCID: o.CID}
		if err := j.update(func(tx store.Tx) error { return j.beginIntent(tx, &intent) }); err != nil {
			return nil, err
		}
		err := j.step("Deleting orphaned disk", o.CID, func() error {
			err := d.cfg.CPI.DeleteDisk(j.cpiCtx(0), cpiv2.MustCID[cpiv2.DiskKind](o.CID))
			if errors.Is(err, cpiv2.ErrDiskNotFound) { // bosh 1242: gone is done
				return nil
			}
			return err
		})
		if err != nil {
			_ = j.update(func(tx store.Tx) error { return endIntent(tx, intent) }) // the orphan stays recorded
			return nil, fmt.Errorf("delete orphaned disk %s: %w", o.CID, err)
		}
		if err := j.update(func(tx store.Tx) error {
			if err := endIntent(tx, intent); err != nil {
				return err
			}
			return tx.Delete(store.OrphanedDisks, o.CID)
		}); err != nil {
			return nil, err
		}
		deleted = append(deleted, o.CID)
	}
	return map[string][]string{"deleted": deleted}, nil
}

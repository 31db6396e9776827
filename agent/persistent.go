package agent

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Mount is one entry of the mounts record (var/vcap/bosh/mounts.json):
// nothing is really mounted; the record says what would be.
type Mount struct {
	// Device is the resolved in-guest device path.
	Device string `json:"device"`
	// MountPoint is /var/vcap/store, or /var/vcap/store_migration_target
	// for a second disk during a migration.
	MountPoint string `json:"mount_point"`
	// Bind is true for a directory disk bound at MountPoint
	// (Config.BindMountPersistentDisk): MountPoint is then a link to
	// Device, a directory.
	Bind bool `json:"bind,omitempty"`
}

func (a *Agent) readHintsLocked() (map[string]DiskSettings, error) {
	hints := map[string]DiskSettings{}
	if _, err := a.readJSON(hintsPath, &hints); err != nil {
		return nil, err
	}
	if hints == nil {
		hints = map[string]DiskSettings{}
	}
	return hints, nil
}

func (a *Agent) readMountsLocked() (map[string]Mount, error) {
	mounts := map[string]Mount{}
	if _, err := a.readJSON(mountsPath, &mounts); err != nil {
		return nil, err
	}
	if mounts == nil {
		mounts = map[string]Mount{}
	}
	return mounts, nil
}

// addPersistentDisk saves the hint in persistent_disk_hints.json.
func (a *Agent) addPersistentDisk(args []json.RawMessage) (any, error) {
	ds, err := a.diskArgs(MethodAddPersistentDisk, args)
	if err != nil {
		return nil, err
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	hints, err := a.readHintsLocked()
	if err != nil {
		return nil, err
	}
	hints[ds.ID] = ds
	if err := a.writeJSON(hintsPath, hints); err != nil {
		return nil, err
	}
	return map[string]string{}, nil
}

// removePersistentDisk deletes the disk's hint.
func (a *Agent) removePersistentDisk(args []json.RawMessage) (any, error) {
	cid, err := a.cidArg(MethodRemovePersistentDisk, args)
	if err != nil {
		return nil, err
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	hints, err := a.readHintsLocked()
	if err != nil {
		return nil, err
	}
	if _, ok := hints[cid]; ok {
		delete(hints, cid)
		if err := a.writeJSON(hintsPath, hints); err != nil {
			return nil, err
		}
	}
	return map[string]string{}, nil
}

// persistentDiskLocked returns the disk's settings: settings.json
// disks.persistent merged with the hints file (the hints file wins).
func (a *Agent) persistentDiskLocked(cid string) (DiskSettings, error) {
	hints, err := a.readHintsLocked()
	if err != nil {
		return DiskSettings{}, err
	}
	if ds, ok := hints[cid]; ok {
		return ds, a.checkSettings(ds)
	}
	if h, ok := a.Settings().Disks.Persistent[cid]; ok {
		ds := DiskSettingsFromHint(cid, h)
		return ds, a.checkSettings(ds)
	}
	return DiskSettings{}, fmt.Errorf("Persistent disk with volume id '%s' could not be found", cid)
}

// mountDisk resolves the disk's device and records it as mounted; a
// directory disk (Config.BindMountPersistentDisk) is also bound at the
// mount point (bindmount.go).
func (a *Agent) mountDisk(args []json.RawMessage) (any, error) {
	cid, err := a.cidArg(MethodMountDisk, args)
	if err != nil {
		return nil, err
	}
	a.diskMu.Lock()
	if err := a.reloadSettingsLocked(); err != nil {
		a.diskMu.Unlock()
		return nil, fmt.Errorf("Refreshing the settings: %w", err)
	}
	ds, err := a.persistentDiskLocked(cid)
	a.diskMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("Reading persistent disk settings: %w", err)
	}
	// Resolve without the lock: polling may take the whole device time-out.
	dev, err := a.resolver.Resolve(ds)
	if err != nil {
		return nil, fmt.Errorf("Mounting persistent disk %s: %w", cid, err)
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	mounts, err := a.readMountsLocked()
	if err != nil {
		return nil, err
	}
	bind := a.cfg.BindMountPersistentDisk
	if m, ok := mounts[cid]; ok && m.Device == dev && (!bind || a.isBindLink(m.MountPoint)) {
		return map[string]string{}, nil
	}
	used := map[string]bool{}
	for c, m := range mounts {
		if c != cid {
			used[m.MountPoint] = true
		}
	}
	mp := storeDir
	if used[storeDir] {
		mp = migrationDir
		if used[migrationDir] {
			return nil, fmt.Errorf("Mounting persistent disk %s: %s and %s are both in use", cid, storeDir, migrationDir)
		}
	}
	if bind {
		if err := a.bindLocked(cid, dev, mp); err != nil {
			return nil, fmt.Errorf("Mounting persistent disk %s: %w", cid, err)
		}
	}
	mounts[cid] = Mount{Device: dev, MountPoint: mp, Bind: bind}
	if err := a.writeJSON(mountsPath, mounts); err != nil {
		return nil, err
	}
	return map[string]string{}, nil
}

// unmountDisk removes the disk's mount record.
func (a *Agent) unmountDisk(args []json.RawMessage) (any, error) {
	cid, err := a.cidArg(MethodUnmountDisk, args)
	if err != nil {
		return nil, err
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	if _, err := a.persistentDiskLocked(cid); err != nil {
		return nil, err
	}
	mounts, err := a.readMountsLocked()
	if err != nil {
		return nil, err
	}
	m, ok := mounts[cid]
	if !ok {
		return map[string]string{"message": fmt.Sprintf("Partition of %s is not mounted", cid)}, nil
	}
	if m.Bind {
		if err := a.unbindLocked(m.MountPoint); err != nil {
			return nil, err
		}
	}
	delete(mounts, cid)
	if err := a.writeJSON(mountsPath, mounts); err != nil {
		return nil, err
	}
	return map[string]string{"message": fmt.Sprintf("Unmounted partition of %s (%s)", cid, m.Device)}, nil
}

// listDisk answers the CIDs of the persistent disks recorded as mounted.
func (a *Agent) listDisk([]json.RawMessage) (any, error) {
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	mounts, err := a.readMountsLocked()
	if err != nil {
		return nil, err
	}
	cids := make([]string, 0, len(mounts))
	for c := range mounts {
		cids = append(cids, c)
	}
	sort.Strings(cids)
	return cids, nil
}

// Mounts returns the mounts record, by disk CID.
func (a *Agent) Mounts() (map[string]Mount, error) {
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	return a.readMountsLocked()
}

// Package fakeiaas is an honest fake cloud for BOSH CPIs, with an oracle
// that tells the truth about it. It keeps real state (stemcells, VMs, disks,
// snapshots, attachments with device names, metadata, user-data, registry
// settings), durable on disk, served on loopback so that many CPI processes
// can share it, with composable fault rules, an operation history and a
// read-only oracle.
//
// # VM roots and disks
//
// Each VM is a directory tree, <data dir>/vms/<vm cid>/root, laid out as
// docs/seams.md fixes: attaching a disk hard-links its sparse backing file
// <data dir>/disks/<disk cid>.img as dev/<sd|xvd|vd><letter>, adds a
// dev/disk/by-id/virtio-<cid prefix> symlink and a
// sys/bus/scsi/devices/2:0:<lun>:0/block/<dev> entry, so bytes written
// through a device on one VM are read back on another after a move. Only
// fakeiaas's own CIDs (kind-uuid) are ever turned into paths; any other
// string a caller sends is just not found.
//
// # VM sizes
//
// A VM is as big as its cloud_properties say (VM.Size, sizes.go): the size
// of its instance_type from InstanceTypes (small, medium, large, xlarge),
// else DefaultVMSize (1 CPU, 1024 MiB RAM, 10240 MiB ephemeral disk), with
// "cpu", "ram" (MiB) and "ephemeral_disk": {"size"} (MiB) overriding each
// part where given. An instance_type fakeiaas does not know gives the
// default; a size that is not a positive integer is refused.
//
// # Durability
//
// The default store is SQLite (modernc.org/sqlite, pure Go) in
// <data dir>/fakeiaas.db, WAL mode, synchronous=FULL: an operation is
// acknowledged only after its transaction is on disk, so a kill -9 (or a
// power cut) loses nothing acknowledged. SQLite rather than an append-only
// log because it gives atomic multi-object commits, crash recovery and
// indexed history queries for free, with no compaction code of our own.
// fsync per operation would cap throughput at the disk's sync rate, so
// commits are grouped: concurrent operations queue their changes in the
// order they were applied in memory, and one of them commits the whole
// queue in a single transaction. On start-up the state is loaded and the
// VM roots and disk files are reconciled with it (files of operations that
// never committed are removed). The "memory" store keeps everything in
// the process, for the simulator and fast tests.
//
// A durable data dir has one owner: New takes its lock (package datadir,
// an flock the kernel drops however the process ends), and a second Cloud
// on it, in this process or another, fails naming the holder's pid.
//
// A create never replaces anything: each CID drawn is checked against the
// objects held and against the files in the data dir (a VM directory is
// made with mkdir, a backing file with O_EXCL), and the store itself
// refuses a create record whose kind and ID it already holds
// (*RecordExistsError, ErrExists).
//
// # Limits
//
// Every size, count and length a caller hands fakeiaas is bounded by a
// documented constant (MaxDiskSizeMiB, MaxVMs, MaxDisks, MaxNameBytes,
// MaxMetadataEntries, MaxDocumentBytes, MaxRequestBytes, MaxFaultRules,
// MaxFaultDelay, …); beyond one a call fails with ErrTooLarge (a
// CloudError; HTTP 422) naming the limit, and changes nothing. Request
// bodies must be valid UTF-8.
//
// # Determinism
//
// Time, randomness and blocking come from Config.Runtime (rt.Runtime):
// CIDs are <kind>-<uuid> with the UUID drawn from the "fakeiaas.cids"
// stream (with the memory store, the same seed gives the same CIDs; the
// sqlite store also mixes in a seed drawn on every open, so a restarted
// cloud never draws an earlier run's CIDs), fault probabilities from
// "fakeiaas.faults", latency faults sleep
// on the runtime clock and pause faults wait on runtime events. Only the
// HTTP server and client, at the edge, use net/http directly.
//
// # Faults
//
// A fault rule matches an operation, a target CID, the nth matching call
// and/or a seeded probability, and has one effect: a typed CPI error (with
// ok_to_retry), latency, a rate limit (HTTP 429, which the reference CPI
// retries), "applied but the response was lost", or a pause until
// released. Rules print and parse as one line:
//
//	op=attach_disk target=vm-… nth=2 effect=error type=DiskNotFound ok_to_retry=true message="boom"
//	op=create_vm prob=0.25 effect=rate_limit delay=50ms
//	op=detach_disk effect=pause
//
// # Example
//
//	cloud, err := fakeiaas.New(fakeiaas.Config{DataDir: dir, Store: "memory"})
//	…
//	sc, _ := cloud.CreateStemcell(ctx, fakeiaas.StemcellSpec{Image: image})
//	vm, _ := cloud.CreateVM(ctx, fakeiaas.VMSpec{AgentID: "agent-1", StemcellCID: sc.CID})
//	disk, _ := cloud.CreateDisk(ctx, fakeiaas.DiskSpec{SizeMiB: 1024})
//	att, _ := cloud.AttachDisk(ctx, vm.CID, disk.CID) // att.Device == "sdc"
//	err = cloud.DeleteDisk(ctx, disk.CID)             // refused: attached (errors.Is(err, fakeiaas.ErrConflict))
//
// Served over HTTP for CPI processes:
//
//	srv, err := fakeiaas.Serve(fakeiaas.ServeConfig{DataDir: dir})
//	client := fakeiaas.NewClient(srv.URL())
//	_, err = client.VM(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-missing")) // errors.Is(err, cpiv2.ErrVMNotFound)
//	history, _ := client.History(ctx, fakeiaas.HistoryFilter{Op: fakeiaas.OpAttachDisk}, 0)
package fakeiaas

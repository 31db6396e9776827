package fakeiaas

import "syscall"

// errNoSpace is what the file system reports when the data dir is full;
// create_disk then fails with NoDiskSpace.
var errNoSpace error = syscall.ENOSPC

package fakeiaas

// CommitStats reports how many sqlite transactions were committed and how
// many operations' batches they carried (0, 0 for the memory store).
func CommitStats(c *Cloud) (commits, batches int64) {
	s, ok := c.st.(*sqliteStore)
	if !ok {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits, s.batches
}

// CreateRecordTwice sends the store a create of disk id, bypassing the
// engine's own check, and returns the store's answer.
func CreateRecordTwice(c *Cloud, id string) error {
	var b batch
	b.create(kindDisk, id, &Disk{SizeMiB: 999})
	c.mu.Lock()
	t := c.st.enqueue(b)
	c.mu.Unlock()
	return t.wait()
}

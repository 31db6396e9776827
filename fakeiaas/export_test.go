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

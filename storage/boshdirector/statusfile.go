package boshdirector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/cpilab/cpilab/internal/strictjson"
	"github.com/cpilab/cpilab/storage"
)

// FileStore is a storage.StatusStore in one JSON file ({volume ID: status}),
// rewritten atomically (a temporary file in the same directory, synced,
// then renamed over the old one) on every Save, so a crash leaves the old
// statuses or the new ones, never a torn file. One process uses a file at a
// time.
type FileStore struct {
	path string

	mu  sync.Mutex // guards all
	all map[string]storage.Status
}

var _ storage.StatusStore = (*FileStore)(nil)

// OpenFileStore reads path (absent: empty). A file that is not a status
// map is an error naming it.
func OpenFileStore(path string) (*FileStore, error) {
	s := &FileStore{path: path, all: map[string]storage.Status{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("status store: %w", err)
	}
	if err := strictjson.Unmarshal(b, &s.all); err != nil {
		return nil, fmt.Errorf("status store %s: not a JSON map of volume statuses: %w", path, err)
	}
	if s.all == nil {
		s.all = map[string]storage.Status{}
	}
	return s, nil
}

// Load returns the status of volume id.
func (s *FileStore) Load(_ context.Context, id string) (storage.Status, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.all[id]
	return st, ok, nil
}

// Save records the status of volume id and rewrites the file.
func (s *FileStore) Save(_ context.Context, id string, st storage.Status) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, had := s.all[id]
	s.all[id] = st
	if err := s.writeLocked(); err != nil {
		if had {
			s.all[id] = prev
		} else {
			delete(s.all, id)
		}
		return err
	}
	return nil
}

func (s *FileStore) writeLocked() error {
	b, err := json.MarshalIndent(s.all, "", "  ")
	if err != nil {
		return fmt.Errorf("status store: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), "."+filepath.Base(s.path)+".*")
	if err != nil {
		return fmt.Errorf("status store: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("status store %s: %w", s.path, err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("status store %s: %w", s.path, err)
	}
	return nil
}

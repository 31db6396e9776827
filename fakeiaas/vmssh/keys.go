package vmssh

import (
	"bytes"
	"sync"

	"golang.org/x/crypto/ssh"
)

// AuthorizedKeys is a registry of the public keys allowed to log in to
// each VM, the counterpart of a guest's authorized_keys files. Its Authorize
// method fits Config.Authorize. The zero value is empty and ready to use;
// it is safe for concurrent use.
type AuthorizedKeys struct {
	mu struct {
		sync.Mutex
		byVM map[string][]ssh.PublicKey
	}
}

// Add allows key to log in as vmCID.
func (a *AuthorizedKeys) Add(vmCID string, key ssh.PublicKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.byVM == nil {
		a.mu.byVM = make(map[string][]ssh.PublicKey)
	}
	a.mu.byVM[vmCID] = append(a.mu.byVM[vmCID], key)
}

// Remove forgets every key of vmCID, as when the VM is deleted.
func (a *AuthorizedKeys) Remove(vmCID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.mu.byVM, vmCID)
}

// Authorize reports whether key was added for vmCID.
func (a *AuthorizedKeys) Authorize(vmCID string, key ssh.PublicKey) bool {
	want := key.Marshal()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range a.mu.byVM[vmCID] {
		if bytes.Equal(k.Marshal(), want) {
			return true
		}
	}
	return false
}

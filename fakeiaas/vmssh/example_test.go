package vmssh_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"

	"github.com/cpilab/cpilab/fakeiaas/vmssh"
)

func Example() {
	const vmCID = "vm-0b5e6c1a-0000-4000-8000-000000000000"
	dataDir, err := os.MkdirTemp("", "vmssh-example")
	check(err)
	defer os.RemoveAll(dataDir)
	root := filepath.Join(dataDir, "vms", vmCID, "root")
	check(os.MkdirAll(filepath.Join(root, "var/vcap/data/dynamic_disks"), 0o755))
	check(os.Mkdir(filepath.Join(root, "dev"), 0o755))
	check(os.WriteFile(filepath.Join(root, "dev/sdc"), []byte("disk bytes"), 0o644))
	check(os.Symlink("/dev/sdc", filepath.Join(root, "var/vcap/data/dynamic_disks/disk-1")))

	_, priv, err := ed25519.GenerateKey(rand.Reader)
	check(err)
	signer, err := ssh.NewSignerFromKey(priv)
	check(err)
	keys := &vmssh.AuthorizedKeys{}
	keys.Add(vmCID, signer.PublicKey())

	srv, err := vmssh.Start(vmssh.Config{
		Authorize: keys.Authorize,
		RootFor: func(cid string) (string, bool) {
			return filepath.Join(dataDir, "vms", cid, "root"), cid == vmCID
		},
	})
	check(err)
	defer srv.Close()

	c, err := vmssh.Dial(vmssh.ClientConfig{Addr: srv.Addr(), VMCID: vmCID, Signer: signer, HostKey: srv.HostKey()})
	check(err)
	defer c.Close()

	link := "/var/vcap/data/dynamic_disks/disk-1"
	target, err := c.ReadLink(link) // the target as stored
	check(err)
	canonical, err := c.RealPath(link) // resolved inside the root
	check(err)
	fi, err := c.Stat(link) // <root>/dev/sdc
	check(err)
	_, err = c.Stat("/etc/passwd") // <root>/etc/passwd: not there
	fmt.Println(target, canonical, fi.Size(), errors.Is(err, fs.ErrNotExist))
	// Output: /dev/sdc /dev/sdc 10 true
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}

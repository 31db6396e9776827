// Package dockerapi is a Docker Engine API face of fakeiaas. It serves the
// subset of the Docker API the BOSH Docker CPI
// (cloudfoundry/bosh-docker-cpi-release) uses, on a unix socket, over the
// same engine, store, VM roots, history, fault rules and oracle as
// fakeiaas's native API. It lets that real, upstream CPI run on the fake
// cloud with every step checked by the oracle.
//
// The mapping (docs/docker.md has the details and the list of endpoints):
//
//   - an image is a stemcell: POST /images/create?fromSrc=- imports a tar
//     (its member cpilab-stemcell.json, when present, is the fakeiaas
//     stemcell image); DELETE /images/{ref} is delete_stemcell;
//   - a container is a VM: create is create_vm (its root is the VM root),
//     remove is delete_vm; start, stop and kill change only the face's
//     view (fakeiaas boots the VM at create);
//   - a named volume is a disk: create is create_disk; a container that
//     binds it gets the disk attached (attach_disk: dev/sdX in the root)
//     and the volume's directory moved to the bind target inside the root;
//     removing the container moves it back out. So the files a guest
//     writes under /warden-cpi-dev/<volume> follow the volume from VM to
//     VM. Recreating a container under the same name (how the Docker CPI
//     attaches a disk) is a delete_vm and a create_vm in fakeiaas's
//     history, as it is a remove and a create in Docker's;
//   - exec runs a small, explicit set of commands on the VM root, the ones
//     the Docker CPI sends: tar -c of one file, tar -x of regular files and
//     directories, and chgrp vcap PATH; anything else is refused at exec
//     create (ErrExecRefused). The stream is Docker's: a hijacked
//     connection (101 UPGRADED) with 8-byte multiplexed frame headers.
//
// Errors are Docker's: its status codes and {"message": …} bodies, so a
// Docker client's errdefs (IsNotFound, IsConflict) work.
//
// # Example
//
//	cloud, _ := fakeiaas.New(fakeiaas.Config{DataDir: dir, Store: "memory"})
//	face, _ := dockerapi.New(dockerapi.Config{Cloud: cloud})
//	srv, _ := dockerapi.Serve(face, filepath.Join(dir, "docker.sock"))
//	defer srv.Close()
//	// Docker CPI config: {"Actions": {"Docker": {"host": srv.Host(), "api_version": "1.44"}, …}}
//	vm, _ := face.ContainerVM("c-…") // the fakeiaas VM behind a Docker CPI VM CID
package dockerapi

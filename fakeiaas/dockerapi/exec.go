package dockerapi

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/moby/moby/api/types/common"
	"github.com/moby/moby/api/types/container"
)

// ErrExecRefused is the reason an exec create is refused: the face runs
// only the commands listed in docs/docker.md, on the VM root.
var ErrExecRefused = errors.New("cpilab's Docker face runs only: tar -c -f - -C DIR -- NAME; tar -x -f - -C DIR; bash -c 'chgrp vcap PATH'")

// execKind is one of the commands the face runs.
type execKind int

const (
	execTarCreate  execKind = iota + 1 // tar -c -f - -C DIR -- NAME: one file to stdout
	execTarExtract                     // tar -x -f - -C DIR: regular files and directories from stdin
	execChgrp                          // bash -c 'chgrp vcap PATH': the file must exist; groups are not modelled
)

type execCmd struct {
	Kind execKind
	Dir  string // absolute, clean (tar -C)
	Name string // tar -c member; chgrp path
}

var chgrpCmd = regexp.MustCompile(`^chgrp vcap (/[A-Za-z0-9_./-]+)$`)

func cleanAbs(p string) bool { return path.IsAbs(p) && path.Clean(p) == p }

// parseExec matches cmd against the allowed commands.
func parseExec(cmd []string) (execCmd, bool) {
	switch {
	case len(cmd) == 8 && cmd[0] == "tar" && cmd[1] == "-c" && cmd[2] == "-f" && cmd[3] == "-" && cmd[4] == "-C" && cmd[6] == "--":
		name := cmd[7]
		if !cleanAbs(cmd[5]) || name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
			return execCmd{}, false
		}
		return execCmd{Kind: execTarCreate, Dir: cmd[5], Name: name}, true
	case len(cmd) == 6 && cmd[0] == "tar" && cmd[1] == "-x" && cmd[2] == "-f" && cmd[3] == "-" && cmd[4] == "-C":
		if !cleanAbs(cmd[5]) {
			return execCmd{}, false
		}
		return execCmd{Kind: execTarExtract, Dir: cmd[5]}, true
	case len(cmd) == 3 && cmd[0] == "bash" && cmd[1] == "-c":
		m := chgrpCmd.FindStringSubmatch(cmd[2])
		if m == nil || !cleanAbs(m[1]) {
			return execCmd{}, false
		}
		return execCmd{Kind: execChgrp, Name: m[1]}, true
	}
	return execCmd{}, false
}

// execRec is one exec instance.
type execRec struct {
	ID        string
	Container string // container name
	Cmd       []string
	Parsed    execCmd
	Req       container.ExecCreateRequest
	Started   bool
	Running   bool
	ExitCode  int
	Finished  bool
}

func (f *Face) execCreate(w http.ResponseWriter, r *http.Request) error {
	var req container.ExecCreateRequest
	if err := decodeBody(r, maxSmallBody, &req); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.containerLocked(r.PathValue("name"))
	if err != nil {
		return err
	}
	if !c.Running {
		return errorf(http.StatusConflict, "Container %s is not running", c.VM)
	}
	if req.Tty {
		return errorf(http.StatusBadRequest, "exec in container %s: Tty is not supported by cpilab's Docker face", c.Name)
	}
	p, ok := parseExec(req.Cmd)
	if !ok {
		return errorf(http.StatusBadRequest, "exec %q in container %s refused: %v", req.Cmd, c.Name, ErrExecRefused)
	}
	rec := &execRec{ID: f.nextIDLocked("exec"), Container: c.Name, Cmd: req.Cmd, Parsed: p, Req: req}
	f.execs[rec.ID] = rec
	f.execOrder = append(f.execOrder, rec.ID)
	f.trimExecsLocked()
	writeJSON(w, http.StatusCreated, common.IDResponse{ID: rec.ID})
	return nil
}

// trimExecsLocked forgets the oldest finished execs beyond MaxExecs.
func (f *Face) trimExecsLocked() {
	for len(f.execOrder) > MaxExecs {
		id := f.execOrder[0]
		if e := f.execs[id]; e != nil && e.Running {
			return
		}
		delete(f.execs, id)
		f.execOrder = f.execOrder[1:]
	}
}

func (f *Face) execInspect(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.execs[r.PathValue("id")]
	if e == nil {
		return errorf(http.StatusNotFound, "No such exec instance: %s", r.PathValue("id"))
	}
	var code *int
	if e.Finished {
		c := e.ExitCode
		code = &c
	}
	var id string
	if c := f.containers[e.Container]; c != nil {
		id = c.VM.String()
	}
	writeJSON(w, http.StatusOK, container.ExecInspectResponse{
		ID: e.ID, Running: e.Running, ExitCode: code, ContainerID: id,
		OpenStdin: e.Req.AttachStdin, OpenStdout: e.Req.AttachStdout, OpenStderr: e.Req.AttachStderr,
		ProcessConfig: &container.ExecProcessConfig{Entrypoint: e.Cmd[0], Arguments: e.Cmd[1:]},
	})
	return nil
}

// execStart serves POST /exec/{id}/start. With "Upgrade: tcp" the
// connection is hijacked (101) and carries stdin one way and the
// multiplexed stdout/stderr stream (8-byte frame headers) the other, as
// the Docker daemon does; without it, the stream is the response body.
// Detach runs the command and answers 200 with no stream.
func (f *Face) execStart(w http.ResponseWriter, r *http.Request) error {
	var req container.ExecStartRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, maxSmallBody, &req); err != nil {
			return err
		}
	}
	if req.Tty {
		return errorf(http.StatusBadRequest, "exec start: Tty is not supported by cpilab's Docker face")
	}
	f.mu.Lock()
	e := f.execs[r.PathValue("id")]
	if e == nil {
		f.mu.Unlock()
		return errorf(http.StatusNotFound, "No such exec instance: %s", r.PathValue("id"))
	}
	if e.Started {
		f.mu.Unlock()
		return errorf(http.StatusConflict, "exec %s has already started", e.ID)
	}
	c := f.containers[e.Container]
	if c == nil || !c.Running {
		f.mu.Unlock()
		return errorf(http.StatusConflict, "Container %s is not running", e.Container)
	}
	root := f.cloud.VMRoot(c.VM)
	e.Started, e.Running = true, true
	f.mu.Unlock()

	finish := func(code int) {
		f.mu.Lock()
		e.Running, e.Finished, e.ExitCode = false, true, code
		f.mu.Unlock()
	}
	if req.Detach {
		code := f.runExec(e, root, bytes.NewReader(nil), io.Discard, io.Discard)
		finish(code)
		w.WriteHeader(http.StatusOK)
		return nil
	}
	upgrade := strings.EqualFold(r.Header.Get("Upgrade"), "tcp")
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		finish(126)
		return errorf(http.StatusInternalServerError, "exec %s: cannot hijack the connection: %v", e.ID, err)
	}
	defer conn.Close()
	// I/O edge: the stream's deadline is wall-clock time.
	_ = conn.SetDeadline(time.Now().Add(f.cfg.ExecTimeout))
	// The frames are multiplexed either way; below API 1.42 Docker still
	// labels the stream raw (moby api/server/router/container/exec.go).
	ctype := "application/vnd.docker.multiplexed-stream"
	if versionLess(requestVersion(r), "1.42") {
		ctype = "application/vnd.docker.raw-stream"
	}
	if upgrade {
		fmt.Fprint(brw, "HTTP/1.1 101 UPGRADED\r\nContent-Type: "+ctype+"\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	} else {
		fmt.Fprint(brw, "HTTP/1.1 200 OK\r\nContent-Type: "+ctype+"\r\nConnection: close\r\n\r\n")
	}
	if err := brw.Flush(); err != nil {
		finish(126)
		return nil
	}
	var stdin io.Reader = bytes.NewReader(nil)
	if e.Req.AttachStdin && upgrade {
		stdin = io.LimitReader(brw.Reader, f.cfg.MaxExecInput+1)
	}
	out := &frameWriter{w: brw.Writer}
	stdout, stderr := io.Writer(io.Discard), io.Writer(io.Discard)
	if e.Req.AttachStdout {
		stdout = out.stream(1)
	}
	if e.Req.AttachStderr {
		stderr = out.stream(2)
	}
	code := f.runExec(e, root, stdin, stdout, stderr)
	if e.Req.AttachStdin && upgrade {
		// Read what is left of stdin (tar's end padding) up to the client's
		// half-close, so that closing does not reset the connection.
		_, _ = io.Copy(io.Discard, io.LimitReader(brw.Reader, f.cfg.MaxExecInput))
	}
	_ = brw.Flush()
	finish(code)
	return nil
}

// frameWriter writes Docker's multiplexed stream: each write is one frame,
// [stream, 0, 0, 0, size (big endian uint32)] then the bytes.
type frameWriter struct{ w *bufio.Writer }

type frameStream struct {
	f      *frameWriter
	stream byte
}

func (f *frameWriter) stream(s byte) io.Writer { return &frameStream{f: f, stream: s} }

func (s *frameStream) Write(p []byte) (int, error) {
	for off := 0; off < len(p); {
		n := min(len(p)-off, 32<<10)
		var h [8]byte
		h[0] = s.stream
		binary.BigEndian.PutUint32(h[4:], uint32(n))
		if _, err := s.f.w.Write(h[:]); err != nil {
			return off, err
		}
		if _, err := s.f.w.Write(p[off : off+n]); err != nil {
			return off, err
		}
		off += n
	}
	return len(p), nil
}

// runExec runs e on the VM root and returns its exit status: 0, or 2 for
// tar's failures (GNU tar's status), 1 for chgrp's.
func (f *Face) runExec(e *execRec, root string, stdin io.Reader, stdout, stderr io.Writer) int {
	rt, err := os.OpenRoot(root)
	if err != nil {
		fmt.Fprintf(stderr, "cpilab: the container's root is gone: %v\n", err)
		return 126
	}
	defer rt.Close()
	rel := func(p string) string {
		if p == "/" {
			return "."
		}
		return strings.TrimPrefix(p, "/")
	}
	switch e.Parsed.Kind {
	case execTarCreate:
		if err := tarCreate(rt, rel(e.Parsed.Dir), e.Parsed.Name, stdout); err != nil {
			fmt.Fprintf(stderr, "tar: %s: %v\ntar: Exiting with failure status due to previous errors\n", e.Parsed.Name, err)
			return 2
		}
		return 0
	case execTarExtract:
		if err := tarExtract(rt, rel(e.Parsed.Dir), stdin, f.cfg.MaxExecInput); err != nil {
			fmt.Fprintf(stderr, "tar: %v\ntar: Exiting with failure status due to previous errors\n", err)
			return 2
		}
		return 0
	case execChgrp:
		if _, err := rt.Lstat(rel(e.Parsed.Name)); err != nil {
			fmt.Fprintf(stderr, "chgrp: cannot access '%s': No such file or directory\n", e.Parsed.Name)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "cpilab: %v\n", ErrExecRefused)
	return 126
}

// tarCreate writes a tar of the one regular file dir/name.
func tarCreate(rt *os.Root, dir, name string, out io.Writer) error {
	p := path.Join(dir, name)
	fi, err := rt.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return errors.New("Cannot stat: No such file or directory")
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New("cpilab's Docker face archives regular files only")
	}
	src, err := rt.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	tw := tar.NewWriter(out)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: fi.ModTime(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, src, fi.Size()); err != nil {
		return err
	}
	return tw.Close()
}

// tarExtract extracts regular files and directories from in under dir;
// members that are links, devices, absolute after cleaning or climb out
// with ".." are refused, as is more than max bytes.
func tarExtract(rt *os.Root, dir string, in io.Reader, max int64) error {
	tr := tar.NewReader(in)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("This does not look like a tar archive: %v", err)
		}
		name := strings.TrimLeft(h.Name, "/")
		if name == "" || strings.Contains("/"+name+"/", "/../") {
			return fmt.Errorf("%s: Member name contains '..' or is empty", h.Name)
		}
		dst := path.Join(dir, path.Clean(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := rt.MkdirAll(dst, 0o755); err != nil {
				return fmt.Errorf("%s: Cannot mkdir: %v", h.Name, err)
			}
		case tar.TypeReg:
			total += h.Size
			if total > max {
				return fmt.Errorf("%s: the archive is larger than %d bytes (Config.MaxExecInput)", h.Name, max)
			}
			if parent := path.Dir(dst); parent != "." {
				if err := rt.MkdirAll(parent, 0o755); err != nil {
					return fmt.Errorf("%s: Cannot mkdir: %v", h.Name, err)
				}
			}
			if fi, err := rt.Lstat(dst); err == nil && !fi.Mode().IsRegular() {
				return fmt.Errorf("%s: Cannot open: exists and is not a regular file", h.Name)
			}
			mode := fs.FileMode(h.Mode).Perm()
			dstF, err := rt.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
			if err != nil {
				return fmt.Errorf("%s: Cannot open: %v", h.Name, err)
			}
			_, cerr := io.Copy(dstF, tr)
			if err := dstF.Close(); cerr == nil {
				cerr = err
			}
			if cerr != nil {
				return fmt.Errorf("%s: Cannot write: %v", h.Name, cerr)
			}
			if err := rt.Chmod(dst, mode); err != nil {
				return fmt.Errorf("%s: Cannot change mode: %v", h.Name, err)
			}
		default:
			return fmt.Errorf("%s: cpilab's Docker face extracts only regular files and directories (type %q)", h.Name, h.Typeflag)
		}
	}
}

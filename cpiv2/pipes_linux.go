package cpiv2

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// pipeSet names the pipes a CPI process was given, as /proc shows them in
// its fd links ("pipe:[INODE]").
type pipeSet map[string]bool

func pipeIDs(files ...*os.File) pipeSet {
	s := pipeSet{}
	for _, f := range files {
		fi, err := f.Stat()
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s[fmt.Sprintf("pipe:[%d]", st.Ino)] = true
		}
	}
	return s
}

// procStat is what /proc/PID/stat says of a process's lineage.
type procStat struct{ ppid, pgrp, session int }

func readProcStat(pid string) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp session …
	if len(f) < 4 {
		return procStat{}, false
	}
	var st procStat
	var e1, e2, e3 error
	st.ppid, e1 = strconv.Atoi(f[1])
	st.pgrp, e2 = strconv.Atoi(f[2])
	st.session, e3 = strconv.Atoi(f[3])
	return st, e1 == nil && e2 == nil && e3 == nil
}

// killPipeHolders SIGKILLs every process that still holds one of pipes
// (leftovers of a CPI that has exited: a daemon that called setsid, say),
// with its process group and its session when they are not the caller's
// own, and returns how many holders it killed. It never kills the caller,
// the caller's group or session, or the caller's own children (which can
// hold the pipes only for the instant between fork and exec).
func killPipeHolders(pipes pipeSet) int {
	if len(pipes) == 0 {
		return 0
	}
	self := os.Getpid()
	me, ok := readProcStat("self")
	if !ok {
		return 0
	}
	me.pgrp = syscall.Getpgrp()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	killed := 0
	sessions := map[int]bool{}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		if !holdsPipe(p.Name(), pipes) {
			continue
		}
		st, ok := readProcStat(p.Name())
		if !ok || st.ppid == self {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
		if st.pgrp > 1 && st.pgrp != me.pgrp {
			_ = syscall.Kill(-st.pgrp, syscall.SIGKILL)
		}
		if st.session > 1 && st.session != me.session {
			sessions[st.session] = true
		}
	}
	if len(sessions) == 0 {
		return killed
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		if st, ok := readProcStat(p.Name()); ok && sessions[st.session] && st.ppid != self {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return killed
}

func holdsPipe(pid string, pipes pipeSet) bool {
	dir := "/proc/" + pid + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false // gone, or not ours to look at
	}
	for _, fd := range fds {
		if link, err := os.Readlink(dir + "/" + fd.Name()); err == nil && pipes[link] {
			return true
		}
	}
	return false
}

// Package proc reads the parts of /proc/PID that a checkpoint needs, with
// the exact field types the kernel uses (64-bit addresses, octal flags).
//
// The numeric and status fields come from github.com/prometheus/procfs
// (stat, status, fdinfo, mountinfo); this package parses by hand only what
// procfs lacks, and each such parser says what is missing there. File
// identity is never taken from path text read out of /proc (see
// ReadLinkedFile).
package proc

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/prometheus/procfs"
)

// root is where proc is mounted; the tests read captured files instead,
// through the unexported functions that take a root.
const root = "/proc"

// Path returns /proc/PID/name... .
func Path(pid sys.PID, name ...string) string {
	return filepath.Join(append([]string{root, pid.String()}, name...)...)
}

// ThreadPath returns /proc/TID/name... : the directory of a thread by its
// TID alone (hidden from a listing of /proc, but there), whose per-thread
// files (status, stat, syscall, wchan...) are the thread's own.
func ThreadPath(tid sys.TID, name ...string) string {
	return filepath.Join(append([]string{root, tid.String()}, name...)...)
}

// procOf opens process id under dir (a proc root, or a task directory)
// for procfs.
func procOf(dir string, id int) (procfs.Proc, error) {
	fs, err := procfs.NewFS(dir)
	if err != nil {
		return procfs.Proc{}, err
	}
	return fs.Proc(id)
}

// Tasks lists the thread IDs of a process, sorted, the leader first.
func Tasks(pid sys.PID) ([]sys.TID, error) {
	ents, err := os.ReadDir(Path(pid, "task"))
	if err != nil {
		return nil, err
	}
	var tids []sys.TID
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, sys.TID(t))
		}
	}
	leader := pid.Leader()
	sort.Slice(tids, func(i, j int) bool {
		if tids[i] == leader || tids[j] == leader {
			return tids[i] == leader
		}
		return tids[i] < tids[j]
	})
	return tids, nil
}

// Children lists the children of every thread of a process.
func Children(pid sys.PID) ([]sys.PID, error) {
	tids, err := Tasks(pid)
	if err != nil {
		return nil, err
	}
	var out []sys.PID
	for _, t := range tids {
		b, err := ReadFile(Path(pid, "task", t.String(), "children"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, sys.PID(c))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// FDs lists the open file descriptors of a process, sorted.
func FDs(pid sys.PID) ([]sys.TargetFD, error) {
	ents, err := os.ReadDir(Path(pid, "fd"))
	if err != nil {
		return nil, err
	}
	out := make([]sys.TargetFD, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, sys.TargetFD(n))
		}
	}
	slices.Sort(out)
	return out, nil
}

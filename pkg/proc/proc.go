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
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// root is where proc is mounted; the tests read captured files instead,
// through the unexported functions that take a root.
const root = "/proc"

// Path returns /proc/PID/name... .
func Path(pid int, name ...string) string {
	return filepath.Join(append([]string{root, strconv.Itoa(pid)}, name...)...)
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
func Tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(Path(pid, "task"))
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, t)
		}
	}
	sort.Slice(tids, func(i, j int) bool {
		if tids[i] == pid || tids[j] == pid {
			return tids[i] == pid
		}
		return tids[i] < tids[j]
	})
	return tids, nil
}

// Children lists the children of every thread of a process.
func Children(pid int) ([]int, error) {
	tids, err := Tasks(pid)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range tids {
		b, err := os.ReadFile(Path(pid, "task", strconv.Itoa(t), "children"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

// FDs lists the open file descriptors of a process, sorted.
func FDs(pid int) ([]int, error) {
	ents, err := os.ReadDir(Path(pid, "fd"))
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}

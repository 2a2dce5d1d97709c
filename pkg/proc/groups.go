package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// Groups is a process's place in the session and process-group
// hierarchy, as ScanGroups lists it.
type Groups struct {
	PID     sys.PID
	Comm    string
	PGRP    sys.PID
	Session sys.PID
}

// ScanGroups calls fn with the process group and session of every
// process of the system (the /proc/PID/stat of each); a process gone
// meanwhile is left out. The files are read in parallel, fn is called in
// the order of the names in /proc, from the calling goroutine. It stops
// at the first error fn returns and returns it.
//
// It is an own parser although procfs has these fields: a dump runs it
// over every process of the machine while the tree is frozen, and
// procfs's Stat (a fmt.Fscan of 44 fields, after a stat of /proc) costs
// three times a bare open and read of each file; only fields 2 to 6 are
// parsed here.
func ScanGroups(fn func(Groups) error) error { return scanGroups(root, nil, fn) }

// ScanGroupsExcept is ScanGroups leaving out the processes in skip,
// whose files are not read.
func ScanGroupsExcept(skip map[sys.PID]bool, fn func(Groups) error) error {
	return scanGroups(root, skip, fn)
}

// KthreaddChildren lists the children of kthreadd, the kernel's creator of
// kernel threads (PID 2, when that is a kernel thread: in a PID namespace
// of its own, PID 2 is an ordinary process, and the list is nil). They
// are kernel threads, in session 0 and process group 0, and the helpers
// the kernel starts with kthreadd as their parent (call_usermodehelper),
// which can only leave session 0 for one of their own (setsid): no
// process of theirs can join an existing session. The list is one read,
// where a stat of each is a read of its own.
func KthreaddChildren() (map[sys.PID]bool, error) { return kthreaddChildren(root) }

func kthreaddChildren(root string) (map[sys.PID]bool, error) {
	st, err := readStat(root, 2, 0)
	if err != nil || st.Flags&PFKthread == 0 {
		return nil, nil // no kthreadd here
	}
	b, err := ReadFile(filepath.Join(root, "2", "task", "2", "children"))
	if err != nil {
		return nil, err
	}
	kids := map[sys.PID]bool{}
	for _, f := range bytes.Fields(b) {
		n, err := strconv.Atoi(string(f))
		if err != nil {
			return nil, fmt.Errorf("%s/2/task/2/children: %q: %w", root, f, err)
		}
		kids[sys.PID(n)] = true
	}
	return kids, nil
}

func scanGroups(root string, skip map[sys.PID]bool, fn func(Groups) error) error {
	dir, err := os.Open(root)
	if err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return err
	}
	slices.Sort(names) // in os.ReadDir's order
	// Read in parallel (a machine's thousands of processes), used in order.
	type entry struct {
		g   Groups
		ok  bool
		err error
	}
	ents := make([]entry, len(names))
	workers := min(runtime.GOMAXPROCS(0), 4, len(names)/64+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1024)
			for i := w; i < len(names); i += workers {
				name := names[i]
				if name == "" || name[0] < '1' || name[0] > '9' {
					continue
				}
				if pid, err := strconv.Atoi(name); err == nil && skip[sys.PID(pid)] {
					continue
				}
				b, err := readSmall(filepath.Join(root, name, "stat"), buf)
				if err != nil {
					continue // not a process, or gone
				}
				buf = b[:cap(b)]
				g, err := parseGroups(b)
				if err != nil {
					err = fmt.Errorf("%s/%s/stat: %w", root, name, err)
				}
				ents[i] = entry{g, true, err}
			}
		}()
	}
	wg.Wait()
	for _, e := range ents {
		if !e.ok {
			continue
		}
		if e.err != nil {
			return e.err
		}
		if err := fn(e.g); err != nil {
			return err
		}
	}
	return nil
}

// ReadFile reads a small /proc file whole, as os.ReadFile does (its
// errors are the same *fs.PathError), with bare system calls: os.File's
// poller registration and size query are 6 more system calls per file,
// which the per-thread files of a dump pay many times while the process
// is frozen.
func ReadFile(path string) ([]byte, error) {
	b, err := readSmall(path, make([]byte, 512))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// readSmall reads a whole file into buf, growing it as needed, with
// bare system calls (no os.File: its poller registration costs more
// than a small /proc file's read).
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := sys.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for errors.Is(err, unix.EINTR) {
		fd, err = sys.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		m, err := unix.Read(fd.Int(), buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
}

// parseGroups parses the PID, comm, process group and session of a stat
// line: "PID (COMM) STATE PPID PGRP SESSION ...", where COMM may hold
// spaces and parentheses (the last ')' ends it).
func parseGroups(b []byte) (Groups, error) {
	var g Groups
	open := bytes.IndexByte(b, '(')
	close := bytes.LastIndexByte(b, ')')
	if open < 1 || close < open {
		return g, fmt.Errorf("malformed stat %q", b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return g, fmt.Errorf("stat field 1: %w", err)
	}
	g.PID, g.Comm = sys.PID(pid), string(b[open+1:close])
	rest := b[close+1:]
	var f [4][]byte // state, ppid, pgrp, session
	for i := range f {
		rest = bytes.TrimLeft(rest, " ")
		end := bytes.IndexAny(rest, " \n")
		if end < 0 {
			end = len(rest)
		}
		if end == 0 {
			return g, fmt.Errorf("stat has %d fields, want at least 6", i+2)
		}
		f[i], rest = rest[:end], rest[end:]
	}
	ids := [2]*sys.PID{&g.PGRP, &g.Session}
	for i, dst := range ids {
		v, err := strconv.Atoi(string(f[2+i]))
		if err != nil {
			return g, fmt.Errorf("stat field %d: %w", 5+i, err)
		}
		*dst = sys.PID(v)
	}
	return g, nil
}

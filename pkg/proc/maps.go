package proc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/smaps with its VmFlags.
type Mapping struct {
	Start, End uint64
	Perms      string // e.g. "r-xp"
	Offset     uint64
	Major      uint32
	Minor      uint32
	Inode      uint64
	Path       string // may end in " (deleted)"
	VmFlags    map[string]bool
}

// Deleted reports whether the mapped file was unlinked.
func (m *Mapping) Deleted() bool { return strings.HasSuffix(m.Path, " (deleted)") }

// File returns the path without the " (deleted)" suffix.
func (m *Mapping) File() string { return strings.TrimSuffix(m.Path, " (deleted)") }

// ReadSmaps parses /proc/PID/smaps.
func ReadSmaps(pid int) ([]Mapping, error) {
	f, err := os.Open(Path(pid, "smaps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseSmaps(f)
}

func parseSmaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "VmFlags:") {
			if len(out) == 0 {
				return nil, fmt.Errorf("smaps: VmFlags before a mapping")
			}
			fl := map[string]bool{}
			for _, f := range strings.Fields(line[len("VmFlags:"):]) {
				fl[f] = true
			}
			out[len(out)-1].VmFlags = fl
			continue
		}
		if m, ok := parseMapLine(line); ok {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

// parseMapLine parses a maps line; lines of smaps fields (Size: ...) fail.
func parseMapLine(line string) (Mapping, bool) {
	var m Mapping
	rng, rest, ok := strings.Cut(line, " ")
	if !ok {
		return m, false
	}
	lo, hi, ok := strings.Cut(rng, "-")
	if !ok {
		return m, false
	}
	var err error
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, false
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, false
	}
	f := strings.SplitN(rest, " ", 4)
	if len(f) < 4 {
		return m, false
	}
	m.Perms = f[0]
	if m.Offset, err = strconv.ParseUint(f[1], 16, 64); err != nil {
		return m, false
	}
	maj, min, _ := strings.Cut(f[2], ":")
	a, _ := strconv.ParseUint(maj, 16, 32)
	b, _ := strconv.ParseUint(min, 16, 32)
	m.Major, m.Minor = uint32(a), uint32(b)
	ino, path, _ := strings.Cut(f[3], " ")
	m.Inode, _ = strconv.ParseUint(ino, 10, 64)
	m.Path = strings.TrimLeft(path, " ")
	return m, true
}

// Limit is one line of /proc/PID/limits; ^uint64(0) means unlimited.
type Limit struct {
	Name     string
	Resource int
	Cur, Max uint64
}

var limitNames = []struct {
	prefix   string
	resource int
}{
	{"Max cpu time", 0}, {"Max file size", 1}, {"Max data size", 2}, {"Max stack size", 3},
	{"Max core file size", 4}, {"Max resident set", 5}, {"Max processes", 6}, {"Max open files", 7},
	{"Max locked memory", 8}, {"Max address space", 9}, {"Max file locks", 10}, {"Max pending signals", 11},
	{"Max msgqueue size", 12}, {"Max nice priority", 13}, {"Max realtime priority", 14}, {"Max realtime timeout", 15},
}

// ReadLimits parses /proc/PID/limits. (prlimit on another user's process
// needs CAP_SYS_RESOURCE, which root lacks on these machines.)
func ReadLimits(pid int) ([]Limit, error) {
	b, err := os.ReadFile(Path(pid, "limits"))
	if err != nil {
		return nil, err
	}
	var out []Limit
	for _, line := range strings.Split(string(b), "\n") {
		for _, ln := range limitNames {
			if !strings.HasPrefix(line, ln.prefix) {
				continue
			}
			f := strings.Fields(line[len(ln.prefix):])
			if len(f) < 2 {
				return nil, fmt.Errorf("limits: malformed line %q", line)
			}
			out = append(out, Limit{Name: ln.prefix, Resource: ln.resource, Cur: limitValue(f[0]), Max: limitValue(f[1])})
		}
	}
	return out, nil
}

func limitValue(s string) uint64 {
	if s == "unlimited" {
		return ^uint64(0)
	}
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// FDInfo holds the fields of /proc/PID/fdinfo/FD.
type FDInfo struct {
	Pos   int64
	Flags int // octal in the file
	MntID int
	Ino   uint64
	Extra map[string]string // everything else, e.g. eventfd-count
	Lines []string          // every line, for repeated keys (epoll tfd)
}

// ReadFDInfo parses /proc/PID/fdinfo/FD.
func ReadFDInfo(pid, fd int) (*FDInfo, error) {
	b, err := os.ReadFile(Path(pid, "fdinfo", strconv.Itoa(fd)))
	if err != nil {
		return nil, err
	}
	fi := &FDInfo{Extra: map[string]string{}}
	fi.Lines = strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for _, line := range fi.Lines {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "pos":
			fi.Pos, _ = strconv.ParseInt(v, 10, 64)
		case "flags":
			f, _ := strconv.ParseUint(v, 8, 32)
			fi.Flags = int(f)
		case "mnt_id":
			fi.MntID, _ = strconv.Atoi(v)
		case "ino":
			fi.Ino, _ = strconv.ParseUint(v, 10, 64)
		default:
			fi.Extra[k] = v
		}
	}
	return fi, nil
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

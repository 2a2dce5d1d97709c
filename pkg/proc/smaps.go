package proc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// Mapping is one mapping of /proc/PID/smaps with its VmFlags.
type Mapping struct {
	Start, End uint64
	Perms      string // e.g. "r-xp"
	Offset     uint64
	Major      uint32
	Minor      uint32
	Inode      uint64
	// Path is the name as the kernel prints it: a pseudo name ("[heap]",
	// "[anon:x]"), or a path that may end in " (deleted)" and may itself
	// contain that text. It names a mapping in messages; the file behind
	// one is found with ReadLinkedFile on its map_files link.
	Path    string
	VmFlags map[string]bool
	// ProtectionKey is the memory protection key of the mapping (0, the
	// default, where the CPU has none).
	ProtectionKey int
	// KernelPageSize is the size of the pages backing the mapping, in
	// bytes: the base page size, or a huge page size for hugetlb memory.
	KernelPageSize uint64
}

// ReadSmaps parses /proc/PID/smaps.
func ReadSmaps(pid sys.PID) ([]Mapping, error) { return readSmaps(root, pid) }

func readSmaps(root string, pid sys.PID) ([]Mapping, error) {
	f, err := os.Open(filepath.Join(root, pid.String(), "smaps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := parseSmaps(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return m, nil
}

// parseSmaps parses smaps by hand: procfs has the maps lines
// (Proc.ProcMaps) and the totals of smaps_rollup, but not the per-mapping
// VmFlags (gd, dc, wf, io, pf, hg...), and reading maps and smaps apart
// could pair lines from two different moments of a running process.
func parseSmaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			if len(out) == 0 {
				return nil, fmt.Errorf("VmFlags before a mapping")
			}
			fl := map[string]bool{}
			for _, f := range strings.Fields(rest) {
				fl[f] = true
			}
			out[len(out)-1].VmFlags = fl
			continue
		}
		if rest, ok := strings.CutPrefix(line, "ProtectionKey:"); ok && len(out) > 0 {
			k, err := strconv.Atoi(strings.TrimSpace(rest))
			if err != nil {
				return nil, fmt.Errorf("ProtectionKey %q: %w", rest, err)
			}
			out[len(out)-1].ProtectionKey = k
			continue
		}
		if rest, ok := strings.CutPrefix(line, "KernelPageSize:"); ok && len(out) > 0 {
			kb, ok := strings.CutSuffix(strings.TrimSpace(rest), " kB")
			n, err := strconv.ParseUint(kb, 10, 64)
			if !ok || err != nil {
				return nil, fmt.Errorf("KernelPageSize %q: not a size in kB", rest)
			}
			out[len(out)-1].KernelPageSize = n << 10
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
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil || m.End < m.Start {
		return m, false
	}
	f := strings.SplitN(rest, " ", 4)
	if len(f) < 4 || len(f[0]) != 4 {
		return m, false
	}
	m.Perms = f[0]
	if m.Offset, err = strconv.ParseUint(f[1], 16, 64); err != nil {
		return m, false
	}
	maj, min, ok := strings.Cut(f[2], ":")
	if !ok {
		return m, false
	}
	a, err1 := strconv.ParseUint(maj, 16, 32)
	b, err2 := strconv.ParseUint(min, 16, 32)
	if err1 != nil || err2 != nil {
		return m, false
	}
	m.Major, m.Minor = uint32(a), uint32(b)
	ino, path, _ := strings.Cut(f[3], " ")
	if m.Inode, err = strconv.ParseUint(ino, 10, 64); err != nil {
		return m, false
	}
	m.Path = strings.TrimLeft(path, " ")
	return m, true
}

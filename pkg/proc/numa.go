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

// NUMAPolicy is the memory policy of one mapping, from its line of
// /proc/PID/numa_maps: "default", or the mode of mbind (or of the thread's
// set_mempolicy) such as "bind:0-1", "interleave:0", "prefer:1", "local".
type NUMAPolicy struct {
	Start  uint64
	Policy string
}

// ReadNUMAPolicies parses /proc/PID/numa_maps, which procfs does not
// read. A kernel without NUMA has no such file (an error for which
// os.IsNotExist is true).
func ReadNUMAPolicies(pid sys.PID) ([]NUMAPolicy, error) { return readNUMAPolicies(root, pid) }

func readNUMAPolicies(root string, pid sys.PID) ([]NUMAPolicy, error) {
	path := filepath.Join(root, pid.String(), "numa_maps")
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ps, err := parseNUMAMaps(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// parseNUMAMaps parses numa_maps lines: the start address in hex, the
// policy, then key=value counters (and file=PATH, whose text is never
// used) that it ignores.
func parseNUMAMaps(r io.Reader) ([]NUMAPolicy, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []NUMAPolicy
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			return nil, fmt.Errorf("line %q: no policy", sc.Text())
		}
		start, err := strconv.ParseUint(fs[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: address: %w", sc.Text(), err)
		}
		out = append(out, NUMAPolicy{Start: start, Policy: fs[1]})
	}
	return out, sc.Err()
}

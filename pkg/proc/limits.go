package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// Limit is one line of /proc/PID/limits; ^uint64(0) means unlimited.
type Limit struct {
	Name     string
	Resource int
	Cur, Max uint64
}

// ReadLimits parses /proc/PID/limits. (prlimit on another user's process
// needs CAP_SYS_RESOURCE, which root lacks on these machines.)
func ReadLimits(pid sys.PID) ([]Limit, error) { return readLimits(root, pid) }

func readLimits(root string, pid sys.PID) ([]Limit, error) {
	b, err := os.ReadFile(filepath.Join(root, pid.String(), "limits"))
	if err != nil {
		return nil, err
	}
	l, err := parseLimits(b)
	if err != nil {
		return nil, fmt.Errorf("%s/%d/limits: %w", root, pid, err)
	}
	return l, nil
}

// parseLimits parses a limits file by hand: procfs.ProcLimits has only the
// soft limit of each resource, and a restore needs the hard one too. Every
// one of the 16 resources must be there.
func parseLimits(b []byte) ([]Limit, error) {
	names := [...]string{
		"Max cpu time", "Max file size", "Max data size", "Max stack size",
		"Max core file size", "Max resident set", "Max processes", "Max open files",
		"Max locked memory", "Max address space", "Max file locks", "Max pending signals",
		"Max msgqueue size", "Max nice priority", "Max realtime priority", "Max realtime timeout",
	}
	var out []Limit
	for _, line := range strings.Split(string(b), "\n") {
		for res, name := range names {
			if !strings.HasPrefix(line, name+" ") {
				continue
			}
			f := strings.Fields(line[len(name):])
			if len(f) < 2 {
				return nil, fmt.Errorf("malformed line %q", line)
			}
			cur, err := limitValue(f[0])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			max, err := limitValue(f[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out = append(out, Limit{Name: name, Resource: res, Cur: cur, Max: max})
		}
	}
	if len(out) != len(names) {
		return nil, fmt.Errorf("%d resource limits, want %d", len(out), len(names))
	}
	return out, nil
}

func limitValue(s string) (uint64, error) {
	if s == "unlimited" {
		return ^uint64(0), nil
	}
	return strconv.ParseUint(s, 10, 64)
}

package dump

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// memPolicy refuses a thread whose NUMA memory policy (set_mempolicy) is
// not the default: it is per thread, visible to the thread only
// (get_mempolicy), and not restored.
func memPolicy(a asker, th *image.Thread) {
	a.ask("get_mempolicy", 4, func(_ uint64, b []byte) error {
		if mode := binary.LittleEndian.Uint32(b); mode != 0 {
			return fmt.Errorf("thread %d: NUMA memory policy (set_mempolicy mode %#x): cannot be restored: %w", th.TID, mode, ErrUnsupported)
		}
		return nil
	}, unix.SYS_GET_MEMPOLICY, outArg, 0, 0, 0, 0)
}

// vmaPolicies refuses mappings with a NUMA memory policy other than the
// default, as /proc/PID/numa_maps shows it: their own (mbind), or else
// the main thread's (set_mempolicy; the other threads' are asked by
// memPolicy).
func vmaPolicies(pid sys.PID) error {
	maps, err := proc.ReadNUMAPolicies(pid)
	if os.IsNotExist(err) {
		return nil // a kernel without NUMA
	}
	if err != nil {
		return fmt.Errorf("numa_maps: %w", err)
	}
	for _, m := range maps {
		if m.Policy != "default" {
			return fmt.Errorf("mapping at %#x: NUMA memory policy %s (mbind, or the thread's set_mempolicy): cannot be restored: %w", m.Start, m.Policy, ErrUnsupported)
		}
	}
	return nil
}

package restore

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// checkLimits refuses, before anything is created, a process whose state
// ckpt-redo cannot set: capabilities outside its own bounding set, and
// without CAP_SYS_RESOURCE a hard rlimit above its own or an oom_score_adj
// below its own. (The dump refuses these too, when ckpt ran with the same
// limits.)
func checkLimits(p *image.Process) error {
	if err := checkNoReserve(p); err != nil {
		return err
	}
	st, err := proc.ReadStatus(sys.Getpid())
	if err != nil {
		return err
	}
	bnd := st.CapBnd
	creds := []*image.Creds{&p.Creds}
	for i := range p.Threads {
		if c := p.Threads[i].Creds; c != nil {
			creds = append(creds, c)
		}
	}
	for _, c := range creds {
		if extra := (c.CapPrm | c.CapEff | c.CapInh | c.CapBnd | c.CapAmb) &^ bnd; extra != 0 {
			return fmt.Errorf("process %d: capabilities %#x are outside ckpt-redo's bounding set %#x: %w", p.PID, extra, bnd, ErrIncompatible)
		}
	}
	if st.CapEff&(1<<unix.CAP_SYS_RESOURCE) != 0 {
		return nil
	}
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		if own, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p.Misc.OOMScoreAdj < own {
			return fmt.Errorf("process %d: oom_score_adj %d is below ckpt-redo's own %d, and ckpt-redo has no CAP_SYS_RESOURCE to lower it: %w",
				p.PID, p.Misc.OOMScoreAdj, own, ErrIncompatible)
		}
	}
	own, err := proc.ReadLimits(sys.Getpid())
	if err != nil {
		return err
	}
	hard := map[int]uint64{}
	for _, l := range own {
		hard[l.Resource] = l.Max
	}
	for _, l := range p.Rlimits {
		if mine, ok := hard[l.Resource]; ok && l.Max > mine {
			return fmt.Errorf("process %d: rlimit %d: hard limit %d is above ckpt-redo's own %d, and ckpt-redo has no CAP_SYS_RESOURCE to raise it: %w",
				p.PID, l.Resource, l.Max, mine, ErrIncompatible)
		}
	}
	return nil
}

// checkNoReserve refuses a process with MAP_NORESERVE mappings (VmFlags nr)
// on a machine in strict overcommit mode (vm.overcommit_memory 2), where
// the kernel ignores MAP_NORESERVE: they would come back reserved.
func checkNoReserve(p *image.Process) error {
	for i := range p.VMAs {
		v := &p.VMAs[i]
		if !v.NoReserve {
			continue
		}
		b, err := os.ReadFile("/proc/sys/vm/overcommit_memory")
		if err != nil {
			return fmt.Errorf("process %d: mapping %#x-%#x is MAP_NORESERVE: %w", p.PID, v.Start, v.End, err)
		}
		if strings.TrimSpace(string(b)) == "2" {
			return fmt.Errorf("process %d: mapping %#x-%#x is MAP_NORESERVE, which this machine's strict overcommit (vm.overcommit_memory 2) ignores: %w",
				p.PID, v.Start, v.End, ErrIncompatible)
		}
		return nil
	}
	return nil
}

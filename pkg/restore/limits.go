package restore

import (
	"fmt"
	"os"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// checkLimits refuses, before anything is created, a process whose state
// ckpt-redo cannot set without CAP_SYS_RESOURCE: a hard rlimit above
// ckpt-redo's own, or an oom_score_adj below its own. (The dump refuses
// these too, when ckpt ran with the same limits.)
func checkLimits(p *image.Process) error {
	st, err := proc.ReadStatus(os.Getpid())
	if err != nil {
		return err
	}
	if st.CapEff&(1<<unix.CAP_SYS_RESOURCE) != 0 {
		return nil
	}
	own, err := proc.ReadLimits(os.Getpid())
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

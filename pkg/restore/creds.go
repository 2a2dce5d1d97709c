package restore

// Credentials of a process being built, set last, per thread: securebits,
// ids and groups, capabilities, no_new_privs, seccomp. The dump side is
// pkg/dump/collect.go and procattrs.go.

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// creds gives every thread its own credentials (askCreds), last: the
// calls before needed privilege. The batches of a wave of threads run at
// the same time. Every thread has the securebits of the leader (it was
// cloned from it), asked once.
func (b *builder) creds() error {
	sb, err := b.call("prctl(PR_GET_SECUREBITS)", unix.SYS_PRCTL, unix.PR_GET_SECUREBITS)
	if err != nil {
		return err
	}
	return b.inWaves(func(i int, tb *threadBatch) bool {
		return b.askCreds(i, tb, int(sb))
	}, func(int, []uint64) error { return nil })
}

// afterCreds sets what a change of credentials resets: the parent-death
// signal and the dumpable flag.
func (b *builder) afterCreds() error {
	p := b.p
	if p.Misc.PdeathSig != 0 {
		if _, err := b.call("prctl(PR_SET_PDEATHSIG)", unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uint64(p.Misc.PdeathSig)); err != nil {
			return err
		}
	}
	if err := b.mdwe(); err != nil {
		return err
	}
	if p.Misc.Dumpable != 1 {
		if _, err := b.call("prctl(PR_SET_DUMPABLE)", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, uint64(p.Misc.Dumpable)); err != nil {
			return err
		}
	}
	return nil
}

// seccomp adds to tb (the batch of askCreds) the calls that set
// no_new_privs (unless the thread has it: hasNoNewPrivs) and install the seccomp filters of thread i, oldest first,
// with the flags they had. ckpt-redo traces with
// PTRACE_O_SUSPEND_SECCOMP, so the filters do not apply to the calls it
// still makes in the thread; askCreds calls it while the thread still
// has CAP_SYS_ADMIN, which a filter without no_new_privs needs.
func (b *builder) seccomp(tb *threadBatch, i int, hasNoNewPrivs bool) error {
	c := b.threadCreds(i)
	if c.NoNewPrivs && !hasNoNewPrivs {
		tb.add("prctl(PR_SET_NO_NEW_PRIVS)", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	}
	for k := len(c.Filters) - 1; k >= 0; k-- {
		f := c.Filters[k]
		if len(f) == 0 || len(f)%8 != 0 || len(f) > 4096*8 {
			return fmt.Errorf("filter %d is %d bytes: %w", k, len(f), image.ErrCorrupt)
		}
		flags := uint64(0)
		if k < len(c.FilterFlags) {
			flags = c.FilterFlags[k]
		}
		// struct sock_fprog {u16 len; struct sock_filter *filter}, then
		// the filter.
		prog := make([]byte, 16+len(f))
		binary.LittleEndian.PutUint16(prog, uint16(len(f)/8))
		copy(prog[16:], f)
		addr, err := tb.put(prog)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(prog[8:], addr+16)
		if err := b.write(addr-b.gadget, prog[:16]); err != nil {
			return err
		}
		tb.add("seccomp(SECCOMP_SET_MODE_FILTER)", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, addr)
	}
	// Strict mode after the filters: the calls ckpt-redo still makes run
	// because seccomp is suspended while it traces
	// (PTRACE_O_SUSPEND_SECCOMP).
	if b.p.Threads[i].SeccompStrict {
		tb.add("seccomp(SECCOMP_SET_MODE_STRICT)", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_STRICT, 0, 0)
	}
	return nil
}

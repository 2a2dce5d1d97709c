package restore

// Credentials of a process being built, set last, per thread: securebits,
// ids and groups, capabilities, no_new_privs, seccomp. The dump side is
// pkg/dump/collect.go and procattrs.go.

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// creds gives every thread its own credentials (setCreds), last: the
// calls before needed privilege.
func (b *builder) creds() error {
	for i := range b.ins {
		if err := b.setCreds(i); err != nil {
			return fmt.Errorf("thread %d: %w", b.p.Threads[i].TID, err)
		}
	}
	return nil
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

// seccomp sets no_new_privs and installs the seccomp filters of thread i,
// oldest first, with the flags they had. ckpt-redo traces with
// PTRACE_O_SUSPEND_SECCOMP, so the filters do not apply to the calls it
// still injects; setCreds calls it while the thread still has
// CAP_SYS_ADMIN, which a filter without no_new_privs needs.
func (b *builder) seccomp(i int) error {
	c, in := b.threadCreds(i), b.ins[i]
	if c.NoNewPrivs {
		if _, err := in.Call("prctl(PR_SET_NO_NEW_PRIVS)", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return err
		}
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
		if err := b.write(scratchOff+16, f); err != nil {
			return err
		}
		prog := struct {
			Len    uint16
			_      [6]byte
			Filter uint64
		}{Len: uint16(len(f) / 8), Filter: b.gadget + scratchOff + 16}
		if err := b.write(scratchOff, ptrace.Bytes(&prog)); err != nil {
			return err
		}
		if _, err := in.Call("seccomp(SECCOMP_SET_MODE_FILTER)", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, b.gadget+scratchOff); err != nil {
			return err
		}
	}
	// Strict mode after the filters: the calls ckpt-redo still injects
	// run because seccomp is suspended while it traces
	// (PTRACE_O_SUSPEND_SECCOMP).
	if b.p.Threads[i].SeccompStrict {
		if _, err := in.Call("seccomp(SECCOMP_SET_MODE_STRICT)", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_STRICT, 0, 0); err != nil {
			return err
		}
	}
	return nil
}

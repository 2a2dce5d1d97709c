package restore

// Credentials of a process being built, set last, per thread: securebits,
// ids and groups, capabilities, no_new_privs, seccomp. The dump side is
// pkg/dump/collect.go and procattrs.go.

import (
	"bytes"
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
	if err := b.syncFilters(); err != nil {
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
	// Always: a change of credentials set it to fs.suid_dumpable (0),
	// also where the process had made itself dumpable again.
	if _, err := b.call("prctl(PR_SET_DUMPABLE)", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, uint64(p.Misc.Dumpable)); err != nil {
		return err
	}
	return nil
}

// seccomp adds to tb (the batch of askCreds) the calls that set
// no_new_privs (unless the thread has it: hasNoNewPrivs) and install the seccomp filters of thread i, oldest first
// (Filters[0] is the oldest: the order decides which of two filters
// returning the same action wins, the newest), with the flags they had,
// but for those shared by all threads (syncFilters). ckpt-redo traces with
// PTRACE_O_SUSPEND_SECCOMP, so the filters do not apply to the calls it
// still makes in the thread; askCreds calls it while the thread still
// has CAP_SYS_ADMIN, which a filter without no_new_privs needs.
func (b *builder) seccomp(tb *threadBatch, i int, hasNoNewPrivs bool) error {
	c := b.threadCreds(i)
	if c.NoNewPrivs && !hasNoNewPrivs {
		tb.add("prctl(PR_SET_NO_NEW_PRIVS)", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	}
	for k := b.sharedFilters; k < len(c.Filters); k++ {
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

// commonFilters counts the oldest seccomp filters (program and flags) that
// every thread of the process has, when it has several threads and all of
// them have filters and the same no_new_privs: the filters they share
// since they were cloned from one another. A thread without filters, or
// with other ones first, shares none.
func (b *builder) commonFilters() int {
	if len(b.p.Threads) < 2 {
		return 0
	}
	first := b.threadCreds(0)
	n := len(first.Filters)
	for i := 1; i < len(b.p.Threads); i++ {
		c := b.threadCreds(i)
		if c.NoNewPrivs != first.NoNewPrivs {
			return 0
		}
		k := 0
		for k < n && k < len(c.Filters) && sameFilter(first, c, k) {
			k++
		}
		n = k
	}
	return n
}

// sameFilter tells whether filter k of a and of b are the same program
// with the same flags.
func sameFilter(a, b *image.Creds, k int) bool {
	fa, fb := uint64(0), uint64(0)
	if k < len(a.FilterFlags) {
		fa = a.FilterFlags[k]
	}
	if k < len(b.FilterFlags) {
		fb = b.FilterFlags[k]
	}
	return fa == fb && bytes.Equal(a.Filters[k], b.Filters[k])
}

// syncFilters installs the seccomp filters all threads share (commonFilters)
// in the leader with SECCOMP_FILTER_FLAG_TSYNC, which gives every thread
// the same filters, not copies: a later TSYNC of the program (allowed only
// over filters a thread shares) then works as before. It runs while the
// leader still has CAP_SYS_ADMIN, before the threads' own credentials.
func (b *builder) syncFilters() error {
	k := b.commonFilters()
	c := b.threadCreds(0)
	for idx := 0; idx < k; idx++ {
		f := c.Filters[idx]
		if len(f) == 0 || len(f)%8 != 0 || len(f) > 4096*8 {
			return fmt.Errorf("seccomp filter %d is %d bytes: %w", idx, len(f), image.ErrCorrupt)
		}
		flags := uint64(unix.SECCOMP_FILTER_FLAG_TSYNC)
		if idx < len(c.FilterFlags) {
			flags |= c.FilterFlags[idx]
		}
		prog := make([]byte, 16+len(f))
		binary.LittleEndian.PutUint16(prog, uint16(len(f)/8))
		binary.LittleEndian.PutUint64(prog[8:], b.gadget+scratchOff+16)
		copy(prog[16:], f)
		if err := b.write(scratchOff, prog); err != nil {
			return err
		}
		ret, err := b.call("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC)", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, b.gadget+scratchOff)
		if err != nil {
			return err
		}
		if ret != 0 { // TSYNC names the thread it could not synchronize
			return fmt.Errorf("seccomp filter %d shared by all threads: thread %d could not take it (TSYNC)", idx, ret)
		}
	}
	b.sharedFilters = k
	return nil
}

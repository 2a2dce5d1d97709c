package fdkind

import (
	"fmt"
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// setFlags are the status flags F_SETFL can change on an open file
// description; the others are given when it is opened.
const setFlags = unix.O_APPEND | unix.O_ASYNC | unix.O_DIRECT | unix.O_NOATIME | unix.O_NONBLOCK

// checkedFlags are the status flags a restored description must have
// exactly as it had them (O_LARGEFILE is left out: every open on x86-64
// sets it, pipe2 and socket never do, and nothing can observe the
// difference on a 64-bit process). O_EXCL shows only on a pidfd of a
// thread (PIDFD_THREAD).
const checkedFlags = unix.O_ACCMODE | setFlags | unix.O_SYNC | unix.O_DSYNC | unix.O_PATH | unix.O_EXCL

// describeCommon saves what every open file description has: its status
// flags, position and OFD and flock locks (from fdinfo), and who gets
// SIGIO for it and with which user IDs it was set (F_GETOWN_EX,
// F_GETOWNER_UIDS, F_GETSIG on ckpt's copy of it, cp).
func describeCommon(s *Source, cp int, f *image.File) error {
	f.Flags = s.Info.Flags &^ unix.O_CLOEXEC
	f.Pos = s.Info.Pos
	_, desc, err := Locks(s.Info.Lines)
	if err != nil {
		return err
	}
	f.Locks = desc
	if cp < 0 || f.Flags&unix.O_PATH != 0 {
		return nil // fcntl cannot ask an O_PATH fd
	}
	ow, err := sys.GetOwner(cp)
	if err != nil {
		return err
	}
	sig, err := unix.FcntlInt(uintptr(cp), unix.F_GETSIG, 0)
	if err != nil {
		return fmt.Errorf("fcntl F_GETSIG: %w", err)
	}
	if ow.PID != 0 || sig != 0 {
		f.Owner = &image.FileOwner{Type: int(ow.Type), PID: int(ow.PID), Sig: sig}
	}
	if ow.PID != 0 {
		if f.Owner.UID, f.Owner.EUID, err = sys.GetOwnerUIDs(cp); err != nil {
			return err
		}
	}
	return nil
}

// Describe saves the open file description behind one fd of a frozen
// process: its kind's part (which may refuse it), then what every
// description has. cp is
// ckpt's own copy of the fd (pidfd_getfd), or -1.
func Describe(env DumpEnv, s *Source, cp int) (*image.File, error) {
	k, err := Find(s)
	if err != nil {
		return nil, err
	}
	f := &image.File{Kind: k.Name}
	s.Copy = cp
	if err := k.Describe(env, s, f); err != nil {
		return nil, err
	}
	if err := describeCommon(s, cp, f); err != nil {
		return nil, err
	}
	if !k.Seekable {
		f.Pos = 0
	}
	return f, nil
}

// Settle gives a description opened in ckpt-redo what every description
// has: its status flags (checked afterwards: they must come back
// exactly), its position and its SIGIO signal. The owner comes later
// (SetOwner), once its process exists.
func Settle(f *image.File, of *os.File) error {
	k, err := Lookup(f.Kind)
	if err != nil {
		return err
	}
	fd := of.Fd()
	cur, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("fcntl F_GETFL: %w", err)
	}
	flags := f.Flags
	if hasLease(f) {
		// a lease sets O_ASYNC (it signals its breaks), which F_SETFL
		// cannot set on a regular file: the lease, taken again later,
		// sets it again
		flags &^= unix.O_ASYNC
	}
	if want := cur&^setFlags | flags&setFlags; want != cur {
		if _, err := unix.FcntlInt(fd, unix.F_SETFL, want); err != nil {
			return fmt.Errorf("fcntl F_SETFL %#o: %w", want, err)
		}
		if cur, err = unix.FcntlInt(fd, unix.F_GETFL, 0); err != nil {
			return fmt.Errorf("fcntl F_GETFL: %w", err)
		}
	}
	if diff := (cur ^ flags) & checkedFlags; diff != 0 {
		return fmt.Errorf("status flags %#o instead of %#o (differing %#o)", cur&checkedFlags, flags&checkedFlags, diff)
	}
	if k.Seekable && f.Pos != 0 {
		if _, err := unix.Seek(int(fd), f.Pos, 0); err != nil {
			return fmt.Errorf("seek to %d: %w", f.Pos, err)
		}
	}
	if o := f.Owner; o != nil && o.Sig != 0 {
		if _, err := unix.FcntlInt(fd, unix.F_SETSIG, o.Sig); err != nil {
			return fmt.Errorf("fcntl F_SETSIG %d: %w", o.Sig, err)
		}
	}
	return nil
}

// hasLease tells whether a description holds a lease.
func hasLease(f *image.File) bool {
	for _, l := range f.Locks {
		if l.Kind == image.LockLease {
			return true
		}
	}
	return false
}

// SetOwner gives a restored description its F_SETOWN owner, once every
// process of the tree exists.
func SetOwner(f *image.File, of *os.File) error {
	o := f.Owner
	if o == nil || o.PID == 0 {
		return nil
	}
	if err := sys.SetOwnerAs(int(of.Fd()), sys.FOwner{Type: int32(o.Type), PID: int32(o.PID)}, o.UID, o.EUID); err != nil {
		return fmt.Errorf("owner type %d pid %d (set by user %d, effective %d): %w", o.Type, o.PID, o.UID, o.EUID, err)
	}
	return nil
}

// The F_SETOWN_EX owner types (x/sys/unix does not name them).
const (
	OwnerTID  = 0 // F_OWNER_TID
	OwnerPID  = 1 // F_OWNER_PID
	OwnerPGRP = 2 // F_OWNER_PGRP
)

// CheckOwners refuses, at dump time, a description whose SIGIO owner
// (F_SETOWN_EX) is outside the dump: the restore could not give it back.
// inDump tells whether an owner (F_OWNER_TID, F_OWNER_PID or
// F_OWNER_PGRP, and its ID) is a thread, process or process group of the
// dump.
func CheckOwners(fds []Held, inDump func(typ, id int) bool) error {
	for _, h := range fds {
		o := h.File.Owner
		if o == nil || o.PID == 0 || inDump(o.Type, o.PID) {
			continue
		}
		what := map[int]string{OwnerTID: "thread", OwnerPID: "process", OwnerPGRP: "process group"}[o.Type]
		return fmt.Errorf("process %d fd %d: SIGIO goes to %s %d, outside the dump: cannot be restored: %w", h.PID, h.FD, what, o.PID, ErrUnsupported)
	}
	return nil
}

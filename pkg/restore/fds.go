package restore

// The file descriptor table of a process being built: every fd through
// its kind (pkg/fdkind), the kinds' steps inside the process, and POSIX
// locks last. The dump side is pkg/dump/files.go.

import (
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// fds puts every file at its fd number (dup3 of the helper's copy, or
// opened by the process itself), runs the kinds' in-process steps (epoll
// items) once every fd is in place, closes the helper's copies, and then
// has the process take its POSIX locks again.
func (b *builder) fds() error {
	tg := target{b}
	if b.p.FilesOf == 0 {
		if err := b.fillFDs(tg); err != nil {
			return err
		}
	}
	if b.cwdFD != 0 {
		if _, err := b.call("fchdir to the deleted "+b.p.Misc.Cwd, unix.SYS_FCHDIR, uint64(b.cwdFD)); err != nil {
			return err
		}
	}
	if err := b.procGoneCwd(); err != nil {
		return err
	}
	if err := fdkind.TakeFlocks(tg, b.p, b.t.files); err != nil {
		return err
	}
	if !b.t.lastOfFDTable(b) {
		// another process of its shared table builds later and still
		// needs the passed files
		return nil
	}
	if _, err := b.call("close_range", unix.SYS_CLOSE_RANGE, uint64(b.t.passBase), ^uint64(0), 0); err != nil {
		return err
	}
	// POSIX locks last: closing any fd of a file drops them.
	return fdkind.TakePOSIXLocks(tg, b.p, b.t.files)
}

// lastOfFDTable tells whether b is the last process of its file
// descriptor table to be built (a table shared between processes,
// Process.FilesOf, is filled by the first and closed to the passed files
// by the last).
func (t *tree) lastOfFDTable(b *builder) bool {
	root := func(x *builder) sys.PID {
		for x.p.FilesOf != 0 {
			up, ok := t.byPID[x.p.FilesOf]
			if !ok {
				break
			}
			x = up
		}
		return x.p.PID
	}
	mine, last := root(b), b
	for _, o := range t.live() {
		if root(o) == mine {
			last = o
		}
	}
	return last == b
}

// fillFDs puts every file at its fd number and runs the kinds' steps.
func (b *builder) fillFDs(tg target) error {
	for _, e := range b.p.FDs {
		flags := uint64(0)
		if e.CloExec {
			flags = unix.O_CLOEXEC
		}
		if open := b.t.inTarget[e.File]; open != nil {
			if err := open(tg, e.FD, e.CloExec); err != nil {
				return fmt.Errorf("fd %d: %w", e.FD, err)
			}
			continue
		}
		src, ok := b.t.fileFD[e.File]
		if !ok {
			return fmt.Errorf("fd %d: file %d was not opened: %w", e.FD, e.File, image.ErrCorrupt)
		}
		if _, err := b.call(fmt.Sprintf("dup3 fd %d", e.FD), unix.SYS_DUP3, uint64(src), uint64(e.FD), flags); err != nil {
			return err
		}
	}
	for i := range b.p.Files {
		f := &b.p.Files[i]
		k, err := fdkind.Lookup(f.Kind)
		if err != nil {
			return err
		}
		if k.Steps == nil {
			continue
		}
		if err := k.Steps(tg, b.p, f); err != nil {
			return fmt.Errorf("%s: %w", fdkind.Show(f), err)
		}
	}
	return nil
}

// target is a process being built, as the fd kinds see it.
type target struct{ b *builder }

func (t target) PID() sys.PID { return t.b.p.PID }

func (t target) Call(name string, nr uint64, args ...uint64) (uint64, error) {
	return t.b.call(name, nr, args...)
}

func (t target) Scratch(data []byte) (uint64, error) {
	if err := t.b.write(scratchPathOff, data); err != nil {
		return 0, err
	}
	return t.b.gadget + scratchPathOff, nil
}

func (t target) Passed(fileID int) (sys.TargetFD, bool) {
	fd, ok := t.b.t.fileFD[fileID]
	return fd, ok
}

func (t target) HoldPID(pid sys.PID, fn func() error) error {
	h, err := t.b.t.spawnIDHelper(t.b, pid)
	if err != nil {
		return fmt.Errorf("a process to hold the PID %d of the exited process whose /proc file it held: %w", pid, err)
	}
	ferr := fn()
	if err := h.exit(); err != nil && ferr == nil {
		ferr = err
	}
	return ferr
}

func (t target) HoldPIDIn(pid sys.PID, fn func(held fdkind.Target) error) error {
	h, err := t.b.t.spawnIDHelper(t.b, pid)
	if err != nil {
		return fmt.Errorf("a process to hold the PID %d of an exited process: %w", pid, err)
	}
	// A copy of this process's memory: the same scratch area.
	h.b.gadget = t.b.gadget
	ferr := fn(target{h.b})
	if err := h.exit(); err != nil && ferr == nil {
		ferr = err
	}
	return ferr
}

// chroot gives the process its root directory back (chroot(2) to the
// path ckpt saw at the dump), once nothing is opened by path any more.
func (b *builder) chroot() error {
	root := b.p.Misc.Root
	if root == "" || root == "/" {
		return nil
	}
	if err := b.writeString(scratchPathOff, root); err != nil {
		return err
	}
	_, err := b.call("chroot "+root, unix.SYS_CHROOT, b.gadget+scratchPathOff)
	return err
}

// procGoneCwd enters the working directory of a process that worked in
// the /proc directory of a process that had exited at the dump (its
// dentry unhashed: getcwd fails with ENOENT): while a short-lived child
// holds that PID, then gone again.
func (b *builder) procGoneCwd() error {
	ref := b.p.Misc.CwdRef
	if ref == nil || ref.ProcGone == 0 {
		return nil
	}
	return target{b}.HoldPID(ref.ProcGone, func() error {
		if err := b.writeString(scratchPathOff, b.p.Misc.Cwd); err != nil {
			return err
		}
		_, err := b.call("chdir "+b.p.Misc.Cwd, unix.SYS_CHDIR, b.gadget+scratchPathOff)
		return err
	})
}

// prepareCwd checks the working and root directories, and makes again
// the working directory of a process that had been removed, passing it
// to the process (entered in fds).
func (b *builder) prepareCwd(env fdkind.RestoreEnv) error {
	if err := fdkind.CheckDirs(env, &b.p.Misc); err != nil {
		return err
	}
	ref := b.p.Misc.CwdRef
	if ref == nil || !ref.Deleted {
		return nil
	}
	f, err := fdkind.OpenDeletedDir(env, ref, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	b.cwdFD = b.t.pass(f, true)
	return nil
}

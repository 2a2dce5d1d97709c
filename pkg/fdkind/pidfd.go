package fdkind

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// pidfd is a pidfd, of a process or (PIDFD_THREAD) of a thread: of one of
// the dump (opened by the restored process itself once every process
// exists), of a process outside it
// (opened by PID), or of a process that has exited and been reaped
// (a pidfd of a short-lived child of ckpt-redo that has exited too).
func pidfd() Kind {
	return Kind{
		Name:     image.FilePidfd,
		Match:    anon("[pidfd]"),
		Describe: describePidfd,
		Open:     openPidfd,
		Show:     showPidfd,
	}
}

func showPidfd(f *image.File) string {
	if pid := event(f).PID; pid > 0 {
		return fmt.Sprintf("process %d", pid)
	}
	return "a process that has exited"
}

func describePidfd(env DumpEnv, s *Source, f *image.File) error {
	pid, err := s.Info.PidfdPID()
	if err != nil {
		return fmt.Errorf("pidfd: %w", err)
	}
	if pid <= 0 {
		pid = -1
	}
	f.Event = &image.EventFile{PID: pid}
	return nil
}

func openPidfd(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	pid := event(f).PID
	// O_EXCL is PIDFD_THREAD: a pidfd of one thread.
	flags := f.Flags & (unix.O_NONBLOCK | unix.O_EXCL)
	switch {
	case pid < 0:
		of, err := exitedPidfd()
		return Desc{File: of}, err
	case env.InDump(pid):
		return Desc{InTarget: func(t Target, fd sys.TargetFD, cloexec bool) error {
			r, err := t.Call(fmt.Sprintf("pidfd_open(%d)", pid), unix.SYS_PIDFD_OPEN, uint64(pid), uint64(flags))
			if err != nil {
				return err
			}
			return moveFD(t, sys.TargetFD(r), fd, cloexec)
		}}, nil
	}
	fd, err := unix.PidfdOpen(int(pid), flags)
	if err != nil {
		return Desc{}, fmt.Errorf("pidfd of process %d: %w", pid, err)
	}
	unix.CloseOnExec(fd)
	return Desc{File: os.NewFile(uintptr(fd), "pidfd")}, nil
}

// exitedPidfd returns a pidfd of a process that has exited and been
// reaped: a child of ckpt-redo running /bin/true.
func exitedPidfd() (*os.File, error) {
	fd := -1
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{PidFD: &fd}
	err := cmd.Run()
	if fd < 0 {
		return nil, fmt.Errorf("pidfd of an exited process: run /bin/true: %v", err)
	}
	pidfd, _ := sys.NewFD(fd)
	if err != nil {
		pidfd.Close()
		return nil, fmt.Errorf("pidfd of an exited process: run /bin/true: %v", err)
	}
	unix.CloseOnExec(fd)
	return pidfd.File("pidfd"), nil
}

// moveFD puts the process's fd r at number fd, with FD_CLOEXEC as asked.
func moveFD(t Target, r, fd sys.TargetFD, cloexec bool) error {
	cl := uint64(0)
	if cloexec {
		cl = unix.O_CLOEXEC
	}
	if r == fd {
		_, err := t.Call("fcntl F_SETFD", unix.SYS_FCNTL, uint64(r), unix.F_SETFD, cl/unix.O_CLOEXEC)
		return err
	}
	if _, err := t.Call(fmt.Sprintf("dup3 fd %d", fd), unix.SYS_DUP3, uint64(r), uint64(fd), cl); err != nil {
		return err
	}
	_, err := t.Call("close", unix.SYS_CLOSE, uint64(r))
	return err
}

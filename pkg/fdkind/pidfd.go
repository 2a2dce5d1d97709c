package fdkind

import (
	"fmt"
	"os"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// pidfd is a pidfd of a live process, reopened by its PID.
func pidfd() Kind {
	return Kind{
		Name:     image.FilePidfd,
		Match:    anon("[pidfd]"),
		Describe: describePidfd,
		Open:     openPidfd,
		Show:     func(f *image.File) string { return fmt.Sprintf("process %d", event(f).PID) },
	}
}

func describePidfd(env DumpEnv, s *Source, f *image.File) error {
	pid, err := s.Info.PidfdPID()
	if err != nil {
		return fmt.Errorf("pidfd: %w", err)
	}
	if pid <= 0 {
		return fmt.Errorf("pidfd of a process that has exited: cannot be restored: %w", ErrUnsupported)
	}
	f.Event = &image.EventFile{PID: pid}
	return nil
}

func openPidfd(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	pid := event(f).PID
	fd, err := unix.PidfdOpen(pid, f.Flags&unix.O_NONBLOCK)
	if err != nil {
		return Desc{}, fmt.Errorf("pidfd of process %d: %w", pid, err)
	}
	unix.CloseOnExec(fd)
	return Desc{File: os.NewFile(uintptr(fd), "pidfd")}, nil
}

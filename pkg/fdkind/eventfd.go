package fdkind

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// eventfd is an eventfd with its counter and semaphore mode.
func eventfd() Kind {
	return Kind{
		Name:     image.FileEventfd,
		Match:    anon("[eventfd]"),
		Describe: describeEventfd,
		Open:     openEventfd,
		Show:     showEventfd,
	}
}

// event returns a file's event state, never nil.
func event(f *image.File) *image.EventFile {
	if f.Event == nil {
		return &image.EventFile{}
	}
	return f.Event
}

func describeEventfd(env DumpEnv, s *Source, f *image.File) error {
	e, err := s.Info.Eventfd()
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	f.Event = &image.EventFile{Count: e.Count, Semaphore: e.Semaphore}
	return nil
}

func openEventfd(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	ev := f.Event
	if ev == nil {
		return Desc{}, fmt.Errorf("eventfd without its state: %w", image.ErrCorrupt)
	}
	flags := unix.EFD_CLOEXEC | f.Flags&unix.O_NONBLOCK
	if ev.Semaphore {
		flags |= unix.EFD_SEMAPHORE
	}
	init := uint(min(ev.Count, 0xffffffff))
	fd, err := unix.Eventfd(init, flags)
	if err != nil {
		return Desc{}, fmt.Errorf("eventfd: %w", err)
	}
	of := os.NewFile(uintptr(fd), "eventfd")
	if rest := ev.Count - uint64(init); rest > 0 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], rest)
		if _, err := unix.Write(fd, b[:]); err != nil {
			of.Close()
			return Desc{}, fmt.Errorf("eventfd counter %d: %w", ev.Count, err)
		}
	}
	return Desc{File: of}, nil
}

func showEventfd(f *image.File) string {
	e := event(f)
	if e.Semaphore {
		return fmt.Sprintf("counter %d, semaphore", e.Count)
	}
	return fmt.Sprintf("counter %d", e.Count)
}

package fdkind

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// signalfd is a signalfd with its signal mask.
func signalfd() Kind {
	return Kind{
		Name:     image.FileSigfd,
		Match:    anon("[signalfd]"),
		Describe: describeSignalfd,
		Open:     openSignalfd,
		Show:     showSignalfd,
	}
}

func describeSignalfd(env DumpEnv, s *Source, f *image.File) error {
	m, err := s.Info.Signalfd()
	if err != nil {
		return fmt.Errorf("signalfd: %w", err)
	}
	f.Event = &image.EventFile{SigMask: m}
	return nil
}

func openSignalfd(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	mask := unix.Sigset_t{Val: [16]uint64{event(f).SigMask}}
	fd, err := unix.Signalfd(-1, &mask, unix.SFD_CLOEXEC|f.Flags&unix.O_NONBLOCK)
	if err != nil {
		return Desc{}, fmt.Errorf("signalfd: %w", err)
	}
	return Desc{File: os.NewFile(uintptr(fd), "signalfd")}, nil
}

func showSignalfd(f *image.File) string {
	var sigs []string
	for i := 0; i < 64; i++ {
		if event(f).SigMask&(1<<i) != 0 {
			sigs = append(sigs, strconv.Itoa(i+1))
		}
	}
	return "signals " + strings.Join(sigs, ",")
}

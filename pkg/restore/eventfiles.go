package restore

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// openEvent creates an event file like the one in the image. Its flags
// (O_NONBLOCK) are set on the new open file description.
func openEvent(f *image.File) (*os.File, error) {
	ev := f.Event
	if ev == nil {
		return nil, fmt.Errorf("%s without its state: %w", f.Kind, image.ErrCorrupt)
	}
	nonblock := f.Flags & unix.O_NONBLOCK
	// own holds the new fd until it is handed over to the *os.File; on an
	// error it is closed.
	var own *sys.FD
	defer func() { own.Close() }()
	take := func(raw int, err error) error {
		if err == nil {
			own, err = sys.NewFD(raw)
		}
		return err
	}
	switch f.Kind {
	case image.FileEventfd:
		flags := unix.EFD_CLOEXEC | nonblock
		if ev.Semaphore {
			flags |= unix.EFD_SEMAPHORE
		}
		init := uint(min(ev.Count, 0xffffffff))
		if err := take(unix.Eventfd(init, flags)); err != nil {
			return nil, fmt.Errorf("eventfd: %w", err)
		}
		if rest := ev.Count - uint64(init); rest > 0 {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], rest)
			if _, err := unix.Write(own.Int(), b[:]); err != nil {
				return nil, fmt.Errorf("eventfd counter %d: %w", ev.Count, err)
			}
		}
	case image.FileTimerfd:
		if err := take(unix.TimerfdCreate(ev.Clock, unix.TFD_CLOEXEC|nonblock)); err != nil {
			return nil, fmt.Errorf("timerfd_create clock %d: %w", ev.Clock, err)
		}
		if ev.ValueNs != 0 || ev.IntervalNs != 0 {
			spec := unix.ItimerSpec{Interval: unix.NsecToTimespec(ev.IntervalNs), Value: unix.NsecToTimespec(ev.ValueNs)}
			if spec.Value.Sec == 0 && spec.Value.Nsec == 0 {
				spec.Value.Nsec = 1 // armed, and due now
			}
			// The remaining time is relative; TFD_TIMER_ABSTIME is dropped.
			if err := unix.TimerfdSettime(own.Int(), 0, &spec, nil); err != nil {
				return nil, fmt.Errorf("timerfd_settime: %w", err)
			}
		}
		if ev.Ticks > 0 {
			if err := sys.TimerfdSetTicks(own, ev.Ticks); err != nil {
				return nil, fmt.Errorf("timerfd: set %d unread expirations: %w", ev.Ticks, err)
			}
		}
	case image.FileSigfd:
		mask := unix.Sigset_t{Val: [16]uint64{ev.SigMask}}
		if err := take(unix.Signalfd(-1, &mask, unix.SFD_CLOEXEC|nonblock)); err != nil {
			return nil, fmt.Errorf("signalfd: %w", err)
		}
	case image.FileEpoll:
		if err := take(unix.EpollCreate1(unix.EPOLL_CLOEXEC)); err != nil {
			return nil, fmt.Errorf("epoll_create1: %w", err)
		}
	case image.FilePidfd:
		if err := take(unix.PidfdOpen(ev.PID, nonblock)); err != nil {
			return nil, fmt.Errorf("pidfd of process %d: %w", ev.PID, err)
		}
		unix.CloseOnExec(own.Int())
	default:
		return nil, fmt.Errorf("file kind %q: not supported", f.Kind)
	}
	return own.File(string(f.Kind)), nil
}

// epollItems registers the watched files of every epoll set, by injected
// epoll_ctl in the new process so that each item is keyed by the fd number
// the process knows it by. An item whose fd number was closed since it was
// registered gets its file back at that number just for the call.
func (b *builder) epollItems() error {
	owner := map[int]int{} // fd number -> File ID in the new process
	epfd := map[int]int{}  // epoll File ID -> one of its fds
	for _, e := range b.p.FDs {
		owner[e.FD] = e.File
		if _, ok := epfd[e.File]; !ok {
			epfd[e.File] = e.FD
		}
	}
	for _, f := range b.p.Files {
		if f.Kind != image.FileEpoll || f.Event == nil {
			continue
		}
		efd, ok := epfd[f.ID]
		if !ok {
			continue
		}
		for _, it := range f.Event.Items {
			cur, used := owner[it.FD]
			temp := false
			switch {
			case used && cur == it.File:
			case !used:
				src, ok := b.t.fileFD[it.File]
				if !ok {
					return fmt.Errorf("epoll fd %d: item %d names file %d: %w", efd, it.FD, it.File, image.ErrCorrupt)
				}
				if _, err := b.call("dup3 for epoll", unix.SYS_DUP3, uint64(src), uint64(it.FD), 0); err != nil {
					return err
				}
				temp = true
			default:
				return fmt.Errorf("epoll fd %d: item registered as fd %d, which now holds another file: not supported", efd, it.FD)
			}
			var ev [12]byte
			binary.LittleEndian.PutUint32(ev[0:], it.Events)
			binary.LittleEndian.PutUint64(ev[4:], it.Data)
			if err := b.write(scratchOff, ev[:]); err != nil {
				return err
			}
			if _, err := b.call(fmt.Sprintf("epoll_ctl add fd %d to %d", it.FD, efd), unix.SYS_EPOLL_CTL,
				uint64(efd), unix.EPOLL_CTL_ADD, uint64(it.FD), b.gadget+scratchOff); err != nil {
				return err
			}
			if temp {
				if _, err := b.call("close", unix.SYS_CLOSE, uint64(it.FD)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

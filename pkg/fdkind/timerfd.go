package fdkind

import (
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// timerfd is a timerfd with its clock, its remaining time and interval,
// and its expirations not read yet.
func timerfd() Kind {
	return Kind{
		Name:     image.FileTimerfd,
		Match:    anon("[timerfd]"),
		Describe: describeTimerfd,
		Open:     openTimerfd,
		Show: func(f *image.File) string {
			ev := event(f)
			return fmt.Sprintf("timerfd clock %d, next in %dns, every %dns, %d unread", ev.Clock, ev.ValueNs, ev.IntervalNs, ev.Ticks)
		},
	}
}

func describeTimerfd(env DumpEnv, s *Source, f *image.File) error {
	t, err := s.Info.Timerfd()
	if err != nil {
		return fmt.Errorf("timerfd: %w", err)
	}
	f.Event = &image.EventFile{Clock: t.Clock, Ticks: t.Ticks, SettimeFlags: t.SettimeFlags, ValueNs: t.ValueNs, IntervalNs: t.IntervalNs}
	return nil
}

func openTimerfd(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	ev := f.Event
	if ev == nil {
		return Desc{}, fmt.Errorf("timerfd without its state: %w", image.ErrCorrupt)
	}
	raw, err := unix.TimerfdCreate(ev.Clock, unix.TFD_CLOEXEC|f.Flags&unix.O_NONBLOCK)
	if err != nil {
		return Desc{}, fmt.Errorf("timerfd_create clock %d: %w", ev.Clock, err)
	}
	fd, err := sys.NewFD(raw)
	if err != nil {
		return Desc{}, err
	}
	defer fd.Close()
	if ev.ValueNs != 0 || ev.IntervalNs != 0 {
		spec := unix.ItimerSpec{Interval: unix.NsecToTimespec(ev.IntervalNs), Value: unix.NsecToTimespec(ev.ValueNs)}
		if spec.Value.Sec == 0 && spec.Value.Nsec == 0 {
			spec.Value.Nsec = 1 // armed, and due now
		}
		// The remaining time is relative; TFD_TIMER_ABSTIME is dropped.
		if err := unix.TimerfdSettime(fd.Int(), 0, &spec, nil); err != nil {
			return Desc{}, fmt.Errorf("timerfd_settime: %w", err)
		}
	}
	if ev.Ticks > 0 {
		if err := sys.TimerfdSetTicks(fd, ev.Ticks); err != nil {
			return Desc{}, fmt.Errorf("timerfd: set %d unread expirations: %w", ev.Ticks, err)
		}
	}
	return Desc{File: fd.File("timerfd")}, nil
}

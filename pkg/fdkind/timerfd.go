package fdkind

import (
	"fmt"
	"time"

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
		Show:     showTimerfd,
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

func showTimerfd(f *image.File) string {
	e := event(f)
	if e.ValueNs == 0 {
		return clockName(e.Clock) + ", disarmed"
	}
	d := fmt.Sprintf("%s, next in %v", clockName(e.Clock), time.Duration(e.ValueNs))
	if e.IntervalNs != 0 {
		d += fmt.Sprintf(" then every %v", time.Duration(e.IntervalNs))
	}
	if e.Ticks != 0 {
		d += fmt.Sprintf(", %d expirations unread", e.Ticks)
	}
	return d
}

// clockName names a clock ID.
func clockName(c int) string {
	switch c {
	case unix.CLOCK_REALTIME:
		return "realtime"
	case unix.CLOCK_MONOTONIC:
		return "monotonic"
	case unix.CLOCK_BOOTTIME:
		return "boottime"
	case unix.CLOCK_REALTIME_ALARM:
		return "realtime-alarm"
	case unix.CLOCK_BOOTTIME_ALARM:
		return "boottime-alarm"
	}
	return fmt.Sprintf("clock %d", c)
}

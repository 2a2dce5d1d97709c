package fdkind

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestTimerfdRoundTrip(t *testing.T) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	spec := unix.ItimerSpec{Interval: unix.NsecToTimespec(int64(time.Hour)), Value: unix.NsecToTimespec(int64(time.Hour))}
	if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
		t.Fatal(err)
	}
	f, nf := roundTrip(t, fd)
	if f.Event.IntervalNs != int64(time.Hour) || f.Event.ValueNs <= 0 {
		t.Fatalf("described %+v", f.Event)
	}
	var cur unix.ItimerSpec
	if err := unix.TimerfdGettime(int(nf.Fd()), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.Interval != spec.Interval || cur.Value.Sec < 3500 {
		t.Errorf("restored timer %+v, want an hour", cur)
	}
}

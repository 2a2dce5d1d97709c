package proc

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// The fdinfo fields of the anonymous-inode files, which procfs does not
// parse at all: eventfd, timerfd, signalfd, the items of an epoll set, and
// the process behind a pidfd.

// Eventfd is the state of an eventfd.
type Eventfd struct {
	Count     uint64
	Semaphore bool
}

// Eventfd parses "eventfd-count" (hex) and "eventfd-semaphore".
func (fi *FDInfo) Eventfd() (Eventfd, error) {
	var e Eventfd
	c, ok := fi.Extra["eventfd-count"]
	if !ok {
		return e, fmt.Errorf("no eventfd-count")
	}
	var err error
	if e.Count, err = strconv.ParseUint(c, 16, 64); err != nil {
		return e, fmt.Errorf("eventfd-count %q: %w", c, err)
	}
	e.Semaphore = fi.Extra["eventfd-semaphore"] == "1"
	return e, nil
}

// Timerfd is the state of a timerfd.
type Timerfd struct {
	Clock        int
	Ticks        uint64 // expirations not read yet
	SettimeFlags int
	ValueNs      int64 // time left until the next expiration, 0 disarmed
	IntervalNs   int64
}

// Timerfd parses clockid, ticks, "settime flags" (octal), it_value and
// it_interval ("(sec, nsec)").
func (fi *FDInfo) Timerfd() (Timerfd, error) {
	var t Timerfd
	var err error
	field := func(k string) string {
		v, ok := fi.Extra[k]
		if !ok && err == nil {
			err = fmt.Errorf("no %s", k)
		}
		return v
	}
	clock, ticks, flags := field("clockid"), field("ticks"), field("settime flags")
	value, interval := field("it_value"), field("it_interval")
	if err != nil {
		return t, err
	}
	if t.Clock, err = strconv.Atoi(clock); err != nil {
		return t, fmt.Errorf("clockid %q: %w", clock, err)
	}
	if t.Ticks, err = strconv.ParseUint(ticks, 10, 64); err != nil {
		return t, fmt.Errorf("ticks %q: %w", ticks, err)
	}
	fl, err := strconv.ParseUint(flags, 8, 32)
	if err != nil {
		return t, fmt.Errorf("settime flags %q: %w", flags, err)
	}
	t.SettimeFlags = int(fl)
	if t.ValueNs, err = parseTimespec(value); err != nil {
		return t, fmt.Errorf("it_value: %w", err)
	}
	if t.IntervalNs, err = parseTimespec(interval); err != nil {
		return t, fmt.Errorf("it_interval: %w", err)
	}
	return t, nil
}

// parseTimespec parses "(sec, nsec)" into nanoseconds.
func parseTimespec(s string) (int64, error) {
	var sec, nsec int64
	if _, err := fmt.Sscanf(s, "(%d, %d)", &sec, &nsec); err != nil {
		return 0, fmt.Errorf("timespec %q: %w", s, err)
	}
	if nsec < 0 || nsec >= 1e9 || sec < 0 || sec > 9_223_372_035 {
		return 0, fmt.Errorf("timespec %q out of range", s)
	}
	return sec*1e9 + nsec, nil
}

// Signalfd parses the signal mask of a signalfd ("sigmask", hex).
func (fi *FDInfo) Signalfd() (uint64, error) {
	m, ok := fi.Extra["sigmask"]
	if !ok {
		return 0, fmt.Errorf("no sigmask")
	}
	v, err := strconv.ParseUint(m, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("sigmask %q: %w", m, err)
	}
	return v, nil
}

// EpollItem is one "tfd:" line of an epoll fd: the fd number the item was
// registered under, its event mask and its data.
type EpollItem struct {
	FD     sys.TargetFD
	Events uint32
	Data   uint64
	Pos    int64
	Ino    uint64
	Sdev   uint64
}

// EpollItems parses every "tfd:" line, e.g.
// "tfd:        5 events:       19 data:        5  pos:0 ino:4d1 sdev:f".
func (fi *FDInfo) EpollItems() ([]EpollItem, error) {
	var out []EpollItem
	for _, line := range fi.Lines {
		if !strings.HasPrefix(line, "tfd:") {
			continue
		}
		it, err := parseEpollItem(line)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

func parseEpollItem(line string) (EpollItem, error) {
	var it EpollItem
	f := strings.Fields(line)
	seen := 0
	for i := 0; i < len(f); i++ {
		k, v, ok := strings.Cut(f[i], ":")
		if !ok {
			return it, fmt.Errorf("epoll item %q: field %q", line, f[i])
		}
		if v == "" && i+1 < len(f) { // "tfd:        5": the value is the next field
			i++
			v = f[i]
		}
		var err error
		var n uint64
		switch k {
		case "tfd":
			var fd int
			fd, err = strconv.Atoi(v)
			it.FD = sys.TargetFD(fd)
			seen |= 1
		case "events":
			n, err = strconv.ParseUint(v, 16, 32)
			it.Events = uint32(n)
			seen |= 2
		case "data":
			it.Data, err = strconv.ParseUint(v, 16, 64)
			seen |= 4
		case "pos":
			it.Pos, err = strconv.ParseInt(v, 10, 64)
		case "ino":
			it.Ino, err = strconv.ParseUint(v, 16, 64)
		case "sdev":
			it.Sdev, err = strconv.ParseUint(v, 16, 64)
		}
		if err != nil {
			return it, fmt.Errorf("epoll item %q: %s: %w", line, k, err)
		}
	}
	if seen != 7 {
		return it, fmt.Errorf("epoll item %q: want tfd, events and data", line)
	}
	return it, nil
}

// PidfdPID is the PID of the process a pidfd refers to ("Pid"), -1 once
// it has been reaped.
func (fi *FDInfo) PidfdPID() (sys.PID, error) {
	p, ok := fi.Extra["Pid"]
	if !ok {
		return 0, fmt.Errorf("no Pid")
	}
	v, err := strconv.Atoi(p)
	if err != nil {
		return 0, fmt.Errorf("Pid %q: %w", p, err)
	}
	return sys.PID(v), nil
}

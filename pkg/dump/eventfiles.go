package dump

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// describeAnon describes an anonymous-inode file from its fdinfo.
func (d *dumper) describeAnon(fd int, link string, info *proc.FDInfo) (*image.File, error) {
	f := &image.File{Flags: info.Flags &^ unix.O_CLOEXEC, Pos: info.Pos, Event: &image.EventFile{}}
	ev := f.Event
	name := strings.TrimPrefix(link, "anon_inode:")
	var err error
	switch name {
	case "[eventfd]":
		f.Kind = image.FileEventfd
		ev.Count, err = strconv.ParseUint(strings.TrimSpace(info.Extra["eventfd-count"]), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("eventfd count %q: %w", info.Extra["eventfd-count"], err)
		}
		ev.Semaphore = strings.TrimSpace(info.Extra["eventfd-semaphore"]) == "1"
	case "[timerfd]":
		f.Kind = image.FileTimerfd
		ev.Clock, _ = strconv.Atoi(info.Extra["clockid"])
		ev.Ticks, _ = strconv.ParseUint(info.Extra["ticks"], 10, 64)
		fl, _ := strconv.ParseUint(info.Extra["settime flags"], 8, 32)
		ev.SettimeFlags = int(fl)
		if ev.ValueNs, err = parseTimespec(info.Extra["it_value"]); err != nil {
			return nil, err
		}
		if ev.IntervalNs, err = parseTimespec(info.Extra["it_interval"]); err != nil {
			return nil, err
		}
	case "[signalfd]":
		f.Kind = image.FileSigfd
		ev.SigMask, err = strconv.ParseUint(info.Extra["sigmask"], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("signalfd mask %q: %w", info.Extra["sigmask"], err)
		}
	case "[eventpoll]":
		f.Kind = image.FileEpoll
		for _, line := range info.Lines {
			if !strings.HasPrefix(line, "tfd:") {
				continue
			}
			it, err := parseEpollItem(line)
			if err != nil {
				return nil, err
			}
			ev.Items = append(ev.Items, it)
		}
	case "[pidfd]":
		f.Kind = image.FilePidfd
		ev.PID, _ = strconv.Atoi(info.Extra["Pid"])
		if ev.PID <= 0 {
			return nil, fmt.Errorf("pidfd of a process that has exited: %w", ErrUnsupported)
		}
	default:
		return nil, fmt.Errorf("%s: %w", name, ErrUnsupported)
	}
	return f, nil
}

// parseTimespec parses "(sec, nsec)".
func parseTimespec(s string) (int64, error) {
	var sec, nsec int64
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "(%d, %d)", &sec, &nsec); err != nil {
		return 0, fmt.Errorf("timespec %q: %w", s, err)
	}
	return sec*1e9 + nsec, nil
}

// parseEpollItem parses "tfd: 5 events: 19 data: 5 pos:0 ino:... sdev:...".
func parseEpollItem(line string) (image.EpollItem, error) {
	var it image.EpollItem
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		var err error
		switch f[i] {
		case "tfd:":
			it.FD, err = strconv.Atoi(f[i+1])
		case "events:":
			var v uint64
			v, err = strconv.ParseUint(f[i+1], 16, 32)
			it.Events = uint32(v)
		case "data:":
			it.Data, err = strconv.ParseUint(f[i+1], 16, 64)
		}
		if err != nil {
			return it, fmt.Errorf("epoll item %q: %w", line, err)
		}
	}
	return it, nil
}

// linkEpollItems finds, for every item of every epoll file, the file it
// watches among the process's fds (kcmp KCMP_EPOLL_TFD): the fd it was
// registered under may have been closed or reused since.
func linkEpollItems(pid int, p *image.Process) error {
	byFD := map[int]int{}
	for _, e := range p.FDs {
		byFD[e.FD] = e.File
	}
	for fi := range p.Files {
		f := &p.Files[fi]
		if f.Kind != image.FileEpoll {
			continue
		}
		epfd := -1
		for _, e := range p.FDs {
			if e.File == f.ID {
				epfd = e.FD
				break
			}
		}
		for i := range f.Event.Items {
			it := &f.Event.Items[i]
			watches := func(fd int) bool {
				ok, err := sys.EpollWatches(sys.PID(pid), sys.TargetFD(epfd), sys.TargetFD(it.FD), sys.TargetFD(fd))
				return err == nil && ok
			}
			found := false
			// Usually the fd it was registered under still holds it; only
			// otherwise look through every fd.
			if f, ok := byFD[it.FD]; ok && watches(it.FD) {
				it.File, found = f, true
			}
			for _, e := range p.FDs {
				if found {
					break
				}
				if watches(e.FD) {
					it.File, found = e.File, true
				}
			}
			if !found {
				return fmt.Errorf("fd %d (epoll): registered fd %d refers to a file no fd holds any more: %w", epfd, it.FD, ErrUnsupported)
			}
		}
	}
	return nil
}

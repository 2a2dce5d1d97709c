package fdkind

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// epoll is an epoll set. The set is created empty in ckpt-redo; its items
// are added by the process itself (epoll_ctl injected once its fds are in
// place), so that each is keyed by the fd number it was registered under.
func epoll() Kind {
	return Kind{
		Name:     image.FileEpoll,
		Match:    anon("[eventpoll]"),
		Describe: describeEpoll,
		Finish:   linkEpollItems,
		Open:     openEpoll,
		Steps:    epollItems,
		Show:     showEpoll,
	}
}

func describeEpoll(env DumpEnv, s *Source, f *image.File) error {
	items, err := s.Info.EpollItems()
	if err != nil {
		return err
	}
	f.Event = &image.EventFile{}
	for _, it := range items {
		f.Event.Items = append(f.Event.Items, image.EpollItem{FD: it.FD, Events: it.Events, Data: it.Data})
	}
	return nil
}

// linkEpollItems finds, for every item of every epoll set, the file it
// watches among the fds of the set's process (kcmp KCMP_EPOLL_TFD): the
// fd it was registered under may have been closed or reused since.
func linkEpollItems(env DumpEnv, fds []Held) error {
	byPID := map[int][]Held{}
	for _, h := range fds {
		byPID[h.PID] = append(byPID[h.PID], h)
	}
	done := map[*image.File]bool{}
	for _, h := range fds {
		f := h.File
		if f.Kind != image.FileEpoll || f.Event == nil || done[f] {
			continue
		}
		done[f] = true
		own := byPID[h.PID]
		for i := range f.Event.Items {
			it := &f.Event.Items[i]
			watches := func(fd int) bool {
				ok, err := sys.EpollWatches(sys.PID(h.PID), sys.TargetFD(h.FD), sys.TargetFD(it.FD), sys.TargetFD(fd))
				return err == nil && ok
			}
			found := false
			// Usually the fd it was registered under still holds it; only
			// otherwise look through every fd.
			for _, o := range own {
				if o.FD == it.FD && watches(o.FD) {
					it.File, found = o.File.ID, true
				}
			}
			for _, o := range own {
				if found {
					break
				}
				if watches(o.FD) {
					it.File, found = o.File.ID, true
				}
			}
			if !found {
				return fmt.Errorf("process %d fd %d (epoll): registered fd %d refers to a file no fd holds any more: %w", h.PID, h.FD, it.FD, ErrUnsupported)
			}
		}
	}
	return nil
}

func openEpoll(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return Desc{}, fmt.Errorf("epoll_create1: %w", err)
	}
	return Desc{File: os.NewFile(uintptr(fd), "epoll")}, nil
}

// epollItems registers the watched files of an epoll set by injected
// epoll_ctl. An item whose fd number was closed since it was registered
// gets its file back at that number just for the call.
func epollItems(t Target, p *image.Process, f *image.File) error {
	if f.Event == nil {
		return nil
	}
	owner := map[int]int{} // fd number -> File ID in the process
	efd := -1
	for _, e := range p.FDs {
		owner[e.FD] = e.File
		if e.File == f.ID && efd < 0 {
			efd = e.FD
		}
	}
	if efd < 0 {
		return nil
	}
	for _, it := range f.Event.Items {
		cur, used := owner[it.FD]
		temp := false
		switch {
		case used && cur == it.File:
		case !used:
			src, ok := t.Passed(it.File)
			if !ok {
				return fmt.Errorf("epoll fd %d: item %d names file %d: %w", efd, it.FD, it.File, image.ErrCorrupt)
			}
			if _, err := t.Call("dup3 for epoll", unix.SYS_DUP3, uint64(src), uint64(it.FD), 0); err != nil {
				return err
			}
			temp = true
		default:
			return fmt.Errorf("epoll fd %d: item registered as fd %d, which now holds another file: %w", efd, it.FD, ErrUnsupported)
		}
		var ev [12]byte
		binary.LittleEndian.PutUint32(ev[0:], it.Events)
		binary.LittleEndian.PutUint64(ev[4:], it.Data)
		addr, err := t.Scratch(ev[:])
		if err != nil {
			return err
		}
		if _, err := t.Call(fmt.Sprintf("epoll_ctl add fd %d to %d", it.FD, efd), unix.SYS_EPOLL_CTL,
			uint64(efd), unix.EPOLL_CTL_ADD, uint64(it.FD), addr); err != nil {
			return err
		}
		if temp {
			if _, err := t.Call("close", unix.SYS_CLOSE, uint64(it.FD)); err != nil {
				return err
			}
		}
	}
	return nil
}

func showEpoll(f *image.File) string {
	e := event(f)
	items := make([]string, len(e.Items))
	for i, it := range e.Items {
		items[i] = fmt.Sprintf("fd %d events %#x", it.FD, it.Events)
	}
	return fmt.Sprintf("%d watched: %s", len(e.Items), strings.Join(items, "; "))
}

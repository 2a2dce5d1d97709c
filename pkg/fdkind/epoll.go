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
	byPID := map[sys.PID][]Held{}
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
		seen := map[sys.TargetFD]int{} // tfd -> items with it so far (kcmp's toff)
		for i := range f.Event.Items {
			it := &f.Event.Items[i]
			toff := seen[it.FD]
			seen[it.FD]++
			watches := func(fd sys.TargetFD) bool {
				ok, err := sys.EpollWatchesAt(h.PID, h.FD, it.FD, toff, fd)
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
	owner := map[sys.TargetFD]image.FD{} // fd number -> its entry
	efd := sys.TargetFD(-1)
	for _, e := range p.FDs {
		owner[e.FD] = e
		if e.File == f.ID && efd < 0 {
			efd = e.FD
		}
	}
	if efd < 0 {
		return nil
	}
	for _, it := range f.Event.Items {
		if err := epollAdd(t, efd, it, owner); err != nil {
			return fmt.Errorf("epoll fd %d: %w", efd, err)
		}
	}
	return nil
}

// epollAdd registers one item under the fd number it was registered
// under (the number is part of the item's key). If that number is free
// now, the file is put there just for the call; if it holds another file,
// that file is set aside meanwhile and put back, with its FD_CLOEXEC.
func epollAdd(t Target, efd sys.TargetFD, it image.EpollItem, owner map[sys.TargetFD]image.FD) error {
	cur, used := owner[it.FD]
	if !used || cur.File != it.File {
		src, ok := t.Passed(it.File)
		if !ok {
			return fmt.Errorf("item %d names file %d, which ckpt-redo did not open: %w", it.FD, it.File, ErrUnsupported)
		}
		aside := int64(-1)
		if used {
			r, err := t.Call(fmt.Sprintf("fcntl(%d, F_DUPFD_CLOEXEC)", it.FD), unix.SYS_FCNTL, uint64(it.FD), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return err
			}
			aside = int64(r)
		}
		if _, err := t.Call("dup3 for epoll", unix.SYS_DUP3, uint64(src), uint64(it.FD), 0); err != nil {
			return err
		}
		defer func() {
			if aside < 0 {
				t.Call("close", unix.SYS_CLOSE, uint64(it.FD))
				return
			}
			cl := uint64(0)
			if cur.CloExec {
				cl = unix.O_CLOEXEC
			}
			t.Call("dup3 back", unix.SYS_DUP3, uint64(aside), uint64(it.FD), cl)
			t.Call("close", unix.SYS_CLOSE, uint64(aside))
		}()
	}
	var ev [12]byte
	binary.LittleEndian.PutUint32(ev[0:], it.Events)
	binary.LittleEndian.PutUint64(ev[4:], it.Data)
	addr, err := t.Scratch(ev[:])
	if err != nil {
		return err
	}
	_, err = t.Call(fmt.Sprintf("epoll_ctl add fd %d", it.FD), unix.SYS_EPOLL_CTL, uint64(efd), unix.EPOLL_CTL_ADD, uint64(it.FD), addr)
	return err
}

func showEpoll(f *image.File) string {
	e := event(f)
	items := make([]string, len(e.Items))
	for i, it := range e.Items {
		items[i] = fmt.Sprintf("fd %d events %#x", it.FD, it.Events)
	}
	return fmt.Sprintf("%d watched: %s", len(e.Items), strings.Join(items, "; "))
}

package fdkind

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// selfTarget is a Target whose process is the test process itself: the
// calls an epoll set's steps inject run here, through x/sys/unix, on the
// real kernel. Only the calls those steps make are known.
type selfTarget struct {
	passed  map[int]int // File ID -> our fd holding it
	scratch []byte
	calls   []string
}

func (s *selfTarget) PID() sys.PID { return sys.Getpid() }

func (s *selfTarget) Scratch(data []byte) (uint64, error) {
	s.scratch = append(s.scratch[:0], data...)
	return 1, nil // an address only Call below reads
}

func (s *selfTarget) Passed(fileID int) (sys.TargetFD, bool) {
	fd, ok := s.passed[fileID]
	return sys.TargetFD(fd), ok
}

func (s *selfTarget) HoldPIDIn(sys.PID, func(Target) error) error {
	return fmt.Errorf("selfTarget: no HoldPIDIn")
}

func (s *selfTarget) HoldPID(sys.PID, func() error) error {
	return fmt.Errorf("selfTarget: no HoldPID")
}

func (s *selfTarget) Call(name string, nr uint64, args ...uint64) (uint64, error) {
	s.calls = append(s.calls, name)
	arg := func(i int) int { return int(args[i]) }
	var r int
	var err error
	switch nr {
	case unix.SYS_FCNTL:
		r, err = unix.FcntlInt(uintptr(args[0]), arg(1), arg(2))
	case unix.SYS_DUP3:
		r, err = arg(1), unix.Dup3(arg(0), arg(1), arg(2))
	case unix.SYS_CLOSE:
		err = unix.Close(arg(0))
	case unix.SYS_EPOLL_CTL:
		if args[3] != 1 || len(s.scratch) != 12 {
			return 0, fmt.Errorf("%s: event not in scratch", name)
		}
		ev := unix.EpollEvent{Events: binary.LittleEndian.Uint32(s.scratch)}
		data := binary.LittleEndian.Uint64(s.scratch[4:])
		ev.Fd, ev.Pad = int32(uint32(data)), int32(uint32(data>>32))
		err = unix.EpollCtl(arg(0), arg(1), arg(2), &ev)
	default:
		return 0, fmt.Errorf("%s: selfTarget does not run syscall %d", name, nr)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return uint64(r), nil
}

// TestEpollRoundTrip: an epoll set's items come back under the fd numbers
// they were registered under, with their events and data, also an item
// whose fd was closed since (its file is held under another number) and
// one whose number now holds another file (which keeps that number and
// its FD_CLOEXEC after the restore).
func TestEpollRoundTrip(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	open := func(fd int, err error) int {
		t.Helper()
		must(err)
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	ep := open(unix.EpollCreate1(unix.EPOLL_CLOEXEC))
	evfd := open(unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK))
	var pp [2]int
	must(unix.Pipe2(pp[:], unix.O_CLOEXEC))
	rd, wr := open(pp[0], nil), open(pp[1], nil)
	other := open(unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0))
	add := func(fd int, events uint32, data uint64) {
		t.Helper()
		ev := unix.EpollEvent{Events: events, Fd: int32(uint32(data)), Pad: int32(uint32(data >> 32))}
		must(unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev))
	}
	add(evfd, unix.EPOLLIN, 7)
	add(rd, unix.EPOLLIN|unix.EPOLLET, 0x900000009)
	// gone: the write end registered under a number closed since; the
	// file lives on as wr.
	gone, err := unix.FcntlInt(uintptr(wr), unix.F_DUPFD_CLOEXEC, 200)
	must(err)
	add(gone, unix.EPOLLOUT, 11)
	must(unix.Close(gone))
	// taken: the read end registered under a number that holds /dev/null
	// now (without FD_CLOEXEC); the file lives on as rd.
	taken := open(unix.FcntlInt(uintptr(rd), unix.F_DUPFD_CLOEXEC, 300))
	add(taken, unix.EPOLLIN, 13)
	must(unix.Dup3(other, taken, 0))

	env := newTestEnv(t)
	ids := map[int]int{}
	var held []Held
	var f *image.File
	for i, fd := range []int{ep, evfd, rd, wr, other, taken} {
		d := describeOwn(t, env, fd)
		if fd != taken {
			d.ID = i + 1
		} else {
			d.ID = ids[other]
		}
		ids[fd] = d.ID
		held = append(held, Held{PID: sys.Getpid(), FD: sys.TargetFD(fd), File: d})
		if fd == ep {
			f = d
		}
	}
	if f.Kind != image.FileEpoll || len(f.Event.Items) != 4 {
		t.Fatalf("described %s with %+v", f.Kind, f.Event)
	}
	if err := linkEpollItems(env, held); err != nil {
		t.Fatal(err)
	}
	wantFile := map[sys.TargetFD]int{sys.TargetFD(evfd): ids[evfd], sys.TargetFD(rd): ids[rd], sys.TargetFD(gone): ids[wr], sys.TargetFD(taken): ids[rd]}
	for _, it := range f.Event.Items {
		if it.File != wantFile[it.FD] {
			t.Errorf("item fd %d linked to file %d, want %d", it.FD, it.File, wantFile[it.FD])
		}
	}
	if s := showEpoll(f); !strings.HasPrefix(s, "4 watched: ") || !strings.Contains(s, fmt.Sprintf("fd %d events %#x", rd, uint32(unix.EPOLLIN|unix.EPOLLET|unix.EPOLLERR|unix.EPOLLHUP))) {
		t.Errorf("show: %q", s)
	}

	nf := reopen(t, env, f)
	p := &image.Process{PID: sys.Getpid(), FDs: []image.FD{{FD: sys.TargetFD(nf.Fd()), File: f.ID, CloExec: true}}}
	for _, fd := range []int{evfd, rd, wr, other, taken} {
		p.FDs = append(p.FDs, image.FD{FD: sys.TargetFD(fd), File: ids[fd], CloExec: fd != taken})
	}
	tgt := &selfTarget{passed: map[int]int{ids[evfd]: evfd, ids[rd]: rd, ids[wr]: wr, ids[other]: other}}
	k, err := Lookup(f.Kind)
	must(err)
	must(k.Steps(tgt, p, f))

	want, err := describeOwnItems(ep)
	must(err)
	got, err := describeOwnItems(int(nf.Fd()))
	must(err)
	if got != want {
		t.Errorf("restored items:\n%s\nwant:\n%s", got, want)
	}
	self := sys.PID(os.Getpid())
	for tfd, holder := range map[int]int{evfd: evfd, rd: rd, gone: wr, taken: rd} {
		if ok, err := sys.EpollWatches(self, sys.TargetFD(nf.Fd()), sys.TargetFD(tfd), sys.TargetFD(holder)); err != nil || !ok {
			t.Errorf("restored item fd %d does not watch the file of our fd %d: %v", tfd, holder, err)
		}
	}
	if fl, err := unix.FcntlInt(uintptr(gone), unix.F_GETFD, 0); err == nil {
		t.Errorf("fd %d, closed before the dump, is open after the steps (flags %#x)", gone, fl)
	}
	if same, err := sys.SameFile(sys.PID(os.Getpid()), sys.TargetFD(taken), sys.PID(os.Getpid()), sys.TargetFD(other)); err != nil || !same {
		t.Errorf("fd %d no longer holds /dev/null: %v, %v", taken, same, err)
	}
	if fl, err := unix.FcntlInt(uintptr(taken), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC != 0 {
		t.Errorf("fd %d: FD_CLOEXEC %#x, %v; want it clear as before", taken, fl, err)
	}
	// The restored set works: the eventfd's item fires with its data.
	if _, err := unix.Write(evfd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	evs := make([]unix.EpollEvent, 8)
	n, err := unix.EpollWait(int(nf.Fd()), evs, 0)
	must(err)
	found := false
	for _, ev := range evs[:n] {
		found = found || ev.Fd == 7 && ev.Events&unix.EPOLLIN != 0
	}
	if !found {
		t.Errorf("restored set reports %v, want the eventfd's item (data 7)", evs[:n])
	}
}

// describeOwnItems renders the items of one of our epoll sets as fdinfo
// shows them (fd number, events, data), in the kernel's order.
func describeOwnItems(fd int) (string, error) {
	fi, err := proc.ReadFDInfo(sys.Getpid(), sys.TargetFD(fd))
	if err != nil {
		return "", err
	}
	items, err := fi.EpollItems()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, it := range items {
		fmt.Fprintf(&b, "fd %d events %#x data %#x\n", it.FD, it.Events, it.Data)
	}
	return b.String(), nil
}

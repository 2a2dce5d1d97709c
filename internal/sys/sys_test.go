package sys

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func pipe(t *testing.T) (r, w *FD) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, _ = NewFD(p[0])
	w, _ = NewFD(p[1])
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func TestFD(t *testing.T) {
	r, _ := pipe(t)
	n := r.Int()
	if got := r.String(); got != "fd "+itoa(n) {
		t.Errorf("String() = %q", got)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if r.Int() != -1 || r.String() != "fd closed" {
		t.Errorf("after Close: Int %d, String %q", r.Int(), r.String())
	}
	var nilFD *FD
	if nilFD.Int() != -1 || nilFD.Close() != nil {
		t.Error("nil FD is not closed")
	}
	if _, err := NewFD(-1); err == nil {
		t.Error("NewFD(-1) succeeded")
	}
	_, w := pipe(t)
	f := w.File("w")
	defer f.Close()
	if w.Int() != -1 {
		t.Error("File did not take the fd over")
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Errorf("write through the handed-over file: %v", err)
	}
}

func itoa(n int) string { return TargetFD(n).String() }

func TestSameFile(t *testing.T) {
	me := PID(os.Getpid())
	r, w := pipe(t)
	d, err := unix.Dup(r.Int())
	if err != nil {
		t.Fatal(err)
	}
	dup, _ := NewFD(d)
	defer dup.Close()
	tests := []struct {
		name   string
		a, b   int
		want   bool
		errnum error
	}{
		{"dup", r.Int(), dup.Int(), true, nil},
		{"other end", r.Int(), w.Int(), false, nil},
		{"closed fd", r.Int(), 1 << 20, false, unix.EBADF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SameFile(me, TargetFD(tt.a), me, TargetFD(tt.b))
			if got != tt.want || (err == nil) != (tt.errnum == nil) || !errors.Is(err, tt.errnum) {
				t.Errorf("SameFile = %v, %v; want %v, %v", got, err, tt.want, tt.errnum)
			}
			if err != nil && !strings.Contains(err.Error(), "kcmp") {
				t.Errorf("error %q does not name kcmp", err)
			}
		})
	}
}

func TestEpollWatches(t *testing.T) {
	me := PID(os.Getpid())
	r, w := pipe(t)
	e, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	ep, _ := NewFD(e)
	defer ep.Close()
	if err := unix.EpollCtl(ep.Int(), unix.EPOLL_CTL_ADD, r.Int(), &unix.EpollEvent{Events: unix.EPOLLIN}); err != nil {
		t.Fatal(err)
	}
	epfd, rfd, wfd := TargetFD(ep.Int()), TargetFD(r.Int()), TargetFD(w.Int())
	if ok, err := EpollWatches(me, epfd, rfd, rfd); !ok || err != nil {
		t.Errorf("registered item: %v, %v", ok, err)
	}
	if ok, err := EpollWatches(me, epfd, rfd, wfd); ok || err != nil {
		t.Errorf("other file: %v, %v", ok, err)
	}
	if ok, err := EpollWatches(me, epfd, wfd, wfd); ok || !errors.Is(err, unix.ENOENT) {
		t.Errorf("unregistered item: %v, %v; want ENOENT", ok, err)
	}
}

func TestGetRobustList(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, _, err := GetRobustList(TID(unix.Gettid())); err != nil {
		t.Fatal(err)
	}
	if _, _, err := GetRobustList(TID(1 << 30)); !errors.Is(err, unix.ESRCH) || !strings.Contains(err.Error(), "get_robust_list") {
		t.Errorf("missing thread: %v", err)
	}
}

func TestSockopt(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewFD(fd)
	defer s.Close()
	v := int32(1)
	if err := Setsockopt(s.Int(), unix.SOL_SOCKET, unix.SO_KEEPALIVE, unsafe.Pointer(&v), 4); err != nil {
		t.Fatal(err)
	}
	var got int32
	n, err := Getsockopt(s.Int(), unix.SOL_SOCKET, unix.SO_KEEPALIVE, unsafe.Pointer(&got), 4)
	if err != nil || n != 4 || got != 1 {
		t.Errorf("SO_KEEPALIVE = %d (%d bytes), %v", got, n, err)
	}
	if _, err := Getsockopt(s.Int(), unix.IPPROTO_TCP, unix.TCP_REPAIR_WINDOW, unsafe.Pointer(&got), 4); err == nil || !strings.Contains(err.Error(), "getsockopt") {
		t.Errorf("TCP_REPAIR_WINDOW outside repair: %v", err)
	}
	if q, err := IoctlInt(s.Int(), unix.SIOCOUTQ); err != nil || q != 0 {
		t.Errorf("SIOCOUTQ = %d, %v", q, err)
	}
	r, _ := pipe(t)
	if _, err := IoctlInt(r.Int(), unix.SIOCOUTQNSD); err == nil || !strings.Contains(err.Error(), "SIOCOUTQNSD") {
		t.Errorf("SIOCOUTQNSD on a pipe: %v", err)
	}
}

func TestUserfaultfd(t *testing.T) {
	fd, err := Userfaultfd(unix.O_CLOEXEC | unix.O_NONBLOCK | UffdUserModeOnly)
	if err != nil {
		t.Skipf("userfaultfd: %v", err)
	}
	defer fd.Close()
	if _, err := UffdioAPI(fd, 0); err != nil {
		t.Fatal(err)
	}
	const size = 2 * 4096
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	start := uint64(uintptr(unsafe.Pointer(&mem[0])))
	if _, err := UffdioRegister(fd, start, size, UffdioRegisterModeMissing); err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 4096)
	for i := range src {
		src[i] = byte(i)
	}
	n, err := UffdioCopy(fd, start, src, 0)
	if err != nil || n != 4096 {
		t.Fatalf("UFFDIO_COPY = %d, %v", n, err)
	}
	if mem[4095] != src[4095] {
		t.Errorf("copied page reads %d, want %d", mem[4095], src[4095])
	}
	if _, err := UffdioCopy(fd, start, src, 0); !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), "UFFDIO_COPY") {
		t.Errorf("copy onto a present page: %v, want EEXIST", err)
	}
}

func TestTimerfdSetTicks(t *testing.T) {
	raw, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	fd, _ := NewFD(raw)
	defer fd.Close()
	if err := TimerfdSetTicks(fd, 7); err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	if _, err := unix.Read(fd.Int(), b[:]); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint64(b[:]); got != 7 {
		t.Errorf("read %d expirations, want 7", got)
	}
	r, _ := pipe(t)
	if err := TimerfdSetTicks(r, 1); err == nil || !strings.Contains(err.Error(), "TFD_IOC_SET_TICKS") {
		t.Errorf("on a pipe: %v", err)
	}
}

func TestPidfd(t *testing.T) {
	r, _ := pipe(t)
	pfd, err := PidfdOpen(PID(os.Getpid()), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pfd.Close()
	cp, err := PidfdGetfd(pfd, TargetFD(r.Int()))
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if ok, err := SameFile(PID(os.Getpid()), TargetFD(r.Int()), PID(os.Getpid()), TargetFD(cp.Int())); !ok || err != nil {
		t.Errorf("pidfd_getfd copy is another file: %v, %v", ok, err)
	}
	if _, err := PidfdOpen(PID(1<<30), 0); err == nil || !strings.Contains(err.Error(), "pidfd_open") {
		t.Errorf("missing process: %v", err)
	}
}

func TestClone3SetTIDProbe(t *testing.T) {
	if err := Clone3SetTIDProbe(); err != nil {
		t.Errorf("clone3 set_tid: %v (this kernel has it)", err)
	}
}

func TestOpen(t *testing.T) {
	s, err := Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Socket(-1, 0, 0); err == nil || !strings.Contains(err.Error(), "socket") {
		t.Errorf("bad socket: %v", err)
	}
	pa, pb, err := Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	defer pb.Close()
	if _, err := unix.Write(pa.Int(), []byte("y")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1)
	if n, err := unix.Read(pb.Int(), got); err != nil || n != 1 || got[0] != 'y' {
		t.Error("socketpair: the ends are not connected")
	}
	if _, _, err := Socketpair(-1, 0, 0); err == nil || !strings.Contains(err.Error(), "socketpair") {
		t.Errorf("bad socketpair: %v", err)
	}
	// A listener's connection is taken off its queue.
	l, err := Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := &unix.SockaddrUnix{Name: "@ckpt-sys-test-" + itoa(os.Getpid())}
	if err := unix.Bind(l.Int(), addr); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(l.Int(), 1); err != nil {
		t.Fatal(err)
	}
	c, err := Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := unix.Connect(c.Int(), addr); err != nil {
		t.Fatal(err)
	}
	acc, err := Accept4(l.Int(), unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer acc.Close()
	if err := unix.SetNonblock(l.Int(), true); err != nil {
		t.Fatal(err)
	}
	if _, err := Accept4(l.Int(), 0); err == nil || !errors.Is(err, unix.EAGAIN) || !strings.Contains(err.Error(), "accept4") {
		t.Errorf("accept4 of an empty queue: %v", err)
	}
	r, w, err := Pipe2(unix.O_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := unix.Write(w.Int(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Pipe2(-1); err == nil || !strings.Contains(err.Error(), "pipe2") {
		t.Errorf("bad pipe2: %v", err)
	}
	m, err := MemfdCreate("sys-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := MemfdCreate("x", -1); err == nil || !strings.Contains(err.Error(), "memfd_create") {
		t.Errorf("bad memfd_create: %v", err)
	}
	dir := t.TempDir()
	d, err := Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := Open(dir+"/none", unix.O_RDONLY, 0); !os.IsNotExist(err) || !strings.Contains(err.Error(), dir+"/none") {
		t.Errorf("missing file: %v", err)
	}
	// A handle of the directory opens it again through the mount.
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
	if err != nil {
		t.Skipf("name_to_handle_at: %v", err)
	}
	o, err := OpenByHandleAt(d, h, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if l, err := os.Readlink("/proc/self/fd/" + itoa(o.Int())); err != nil || l != dir {
		t.Errorf("handle opened %q, %v; want %s", l, err, dir)
	}
	if _, err := OpenByHandleAt(&FD{raw: -1}, h, unix.O_PATH); err == nil || !strings.Contains(err.Error(), "open_by_handle_at") {
		t.Errorf("bad mount fd: %v", err)
	}
}

func TestRelease(t *testing.T) {
	r, _ := pipe(t)
	n := r.Int()
	if got := r.Release(); got != n || r.Int() != -1 {
		t.Fatalf("Release() = %d (Int now %d), want %d", got, r.Int(), n)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close after Release: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0); err != nil {
		t.Errorf("fd %d closed by a Close after Release: %v", n, err)
	}
	unix.Close(n)
	var none *FD
	if none.Release() != -1 {
		t.Error("nil FD released a number")
	}
}

func TestDup(t *testing.T) {
	r, _ := pipe(t)
	d, err := Dup(r.Int())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Int() == r.Int() {
		t.Fatalf("Dup gave the same fd %d", d.Int())
	}
	if fl, err := unix.FcntlInt(d.Uintptr(), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("the copy's fd flags %#x, %v: want close-on-exec", fl, err)
	}
	if same, err := SameFile(Getpid(), TargetFD(r.Int()), Getpid(), TargetFD(d.Int())); !same || err != nil {
		t.Errorf("the copy is not the same description: %v, %v", same, err)
	}
	if _, err := Dup(-1); err == nil || !strings.Contains(err.Error(), "F_DUPFD_CLOEXEC") {
		t.Errorf("Dup(-1): %v, want an error naming the call", err)
	}
}

func TestMove(t *testing.T) {
	r, _ := pipe(t)
	n := r.Int()
	m := r.Move()
	if m.Int() != n || r.Int() != -1 {
		t.Fatalf("Move: new FD %d, old %d; want %d and -1", m.Int(), r.Int(), n)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close of the moved-from FD: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0); err != nil {
		t.Errorf("fd %d closed by the moved-from FD: %v", n, err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close of the new owner: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("fd %d after the new owner's Close: %v, want EBADF", n, err)
	}
	if r.Move() != nil || (*FD)(nil).Move() != nil {
		t.Error("a closed or nil FD moved to a non-nil FD")
	}
}

func TestRtSigqueueinfo(t *testing.T) {
	var info [SigInfoSize]byte
	binary.LittleEndian.PutUint32(info[0:], uint32(unix.SIGWINCH))
	binary.LittleEndian.PutUint32(info[8:], uint32(0xffffffff)) // SI_QUEUE
	if err := RtSigqueueinfo(PID(os.Getpid()), unix.SIGWINCH, &info); err != nil {
		t.Fatal(err)
	}
	if err := RtSigqueueinfo(PID(1<<30), unix.SIGWINCH, &info); !errors.Is(err, unix.ESRCH) || !strings.Contains(err.Error(), "rt_sigqueueinfo") {
		t.Errorf("missing process: %v", err)
	}
	if err := RtTgsigqueueinfo(PID(os.Getpid()), TID(unix.Gettid()), unix.SIGWINCH, &info); err != nil {
		t.Fatal(err)
	}
	if err := RtTgsigqueueinfo(PID(os.Getpid()), TID(1<<30), unix.SIGWINCH, &info); !errors.Is(err, unix.ESRCH) || !strings.Contains(err.Error(), "rt_tgsigqueueinfo") {
		t.Errorf("missing thread: %v", err)
	}
}

func TestSemGetPID(t *testing.T) {
	if _, err := SemGetPID(-1, 0); !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "semctl GETPID") {
		t.Errorf("no such set: %v", err)
	}
}

func TestSchedCoreCookie(t *testing.T) {
	c, err := SchedCoreCookie()
	if err != nil {
		if !strings.Contains(err.Error(), "PR_SCHED_CORE_GET") {
			t.Errorf("error %v does not name the call", err)
		}
		return // a kernel without core scheduling
	}
	if c != 0 {
		t.Errorf("cookie %#x, want none", c)
	}
	SchedYield()
}

func TestSetThreadEffectiveIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // left locked if the ids could not be put back
		err := func() error {
			if err := SetThreadEGID(65534); err != nil {
				return err
			}
			if err := SetThreadEUID(65534); err != nil {
				return err
			}
			if unix.Geteuid() != 65534 || unix.Getegid() != 65534 {
				return fmt.Errorf("thread euid %d egid %d, want 65534", unix.Geteuid(), unix.Getegid())
			}
			if err := SetThreadEUID(0); err != nil {
				return err
			}
			return SetThreadEGID(0)
		}()
		if err == nil && unix.Geteuid() == 0 && unix.Getegid() == 0 {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMsgQueue(t *testing.T) {
	id, err := MsgGet(unix.IPC_PRIVATE, unix.IPC_CREAT|0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer MsgRemove(id)
	for i, m := range []string{"first", "second"} {
		if err := MsgSend(id, int64(i+1), []byte(m), unix.IPC_NOWAIT); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := MsgStat(id)
	if err != nil || ds.QNum != 2 || ds.CBytes != uint64(len("firstsecond")) || int(ds.LSPID) != os.Getpid() {
		t.Fatalf("IPC_STAT %+v, %v; want 2 messages of 11 bytes sent by us", ds, err)
	}
	for i, want := range []string{"first", "second"} {
		typ, text, err := MsgPeek(id, i, 64)
		if err != nil || typ != int64(i+1) || string(text) != want {
			t.Errorf("message %d: type %d %q, %v; want type %d %q", i, typ, text, err, i+1, want)
		}
	}
	if ds, err := MsgStat(id); err != nil || ds.QNum != 2 {
		t.Errorf("a peek took a message: %+v, %v", ds, err)
	}
	ds.QBytes = 1024
	if err := MsgSet(id, ds); err != nil {
		t.Fatal(err)
	}
	if err := MsgSend(id, 1, make([]byte, 2048), unix.IPC_NOWAIT); err == nil || !strings.Contains(err.Error(), "msgsnd") {
		t.Errorf("a message over the queue's limit: %v", err)
	}
	if err := MsgRemove(id); err != nil {
		t.Fatal(err)
	}
	if _, err := MsgStat(id); err == nil || !strings.Contains(err.Error(), "msgctl IPC_STAT") {
		t.Errorf("removed queue: %v", err)
	}
	if _, err := MsgGet(0x7fff_1234, 0); err == nil || !strings.Contains(err.Error(), "msgget") {
		t.Errorf("missing key: %v", err)
	}
}

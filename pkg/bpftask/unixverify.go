package bpftask

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrUnixMismatch means that what the UNIX reader read of sockets it
// made itself differs from what they hold: its idea of the kernel's
// structures is wrong, and it must not be used.
var ErrUnixMismatch = fmt.Errorf("BPF UNIX socket queue reader does not read what was sent")

// The connector's ids and groups in the check, and the credentials one
// piece is sent with: unlike root's zeros, they tell a field read at the
// wrong place.
const (
	checkUID, checkGID       = 2345, 4321
	checkMsgUID, checkMsgGID = 1234, 5678
)

var checkGroups = []uint32{4242, 4343, 4444}

// Verify checks the reader on connections it makes in the caller's
// network namespace: a listener, a client that connects with other ids
// and groups and sends pieces (one with credentials of its choosing, one
// with a file in flight), another, bound to a name, that sends and
// closes. What AcceptQueue reads must be what was
// sent, in the same pieces, and what SO_PEERCRED and SO_PEERGROUPS say
// on the accepted ends. A second check, with a piece large enough that
// the kernel puts part of it in pages, finds where the kernel maps
// pages; if it fails, paged pieces are refused (ErrUnixUnreadable).
func (r *UnixReader) Verify() error {
	if err := r.check(false); err != nil {
		return err
	}
	defaults := [][2]uint64{{0xffff888000000000, 0xffffea0000000000}, {0xff11000000000000, 0xffd4000000000000}}
	for i, looked := 0, false; i < len(defaults) || !looked; i++ {
		if i == len(defaults) {
			defaults, looked = append(defaults, r.pageLayout()...), true // slow: only if the defaults fail
			if i == len(defaults) {
				break
			}
		}
		r.pageOffset, r.vmemmap, r.pagedOK = defaults[i][0], defaults[i][1], true
		if r.check(true) == nil {
			return nil
		}
	}
	r.pagedOK = false
	return nil
}

// pageLayout is where the direct map and the struct page array are
// (x86-64) if the kernel randomizes them (its variables, found through
// /proc/kallsyms); Verify tries the defaults of 4- and 5-level paging
// first.
func (r *UnixReader) pageLayout() [][2]uint64 {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		return nil
	}
	var po, vm uint64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "page_offset_base" && f[2] != "vmemmap_base" {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		v, err := r.read1(a, 8)
		if err != nil {
			continue
		}
		if f[2] == "page_offset_base" {
			po = u64(v, 0)
		} else {
			vm = u64(v, 0)
		}
	}
	if po != 0 && vm != 0 {
		return [][2]uint64{{po, vm}}
	}
	return nil
}

// check makes the connections and compares.
func (r *UnixReader) check(paged bool) error {
	name := fmt.Sprintf("@ckpt-unixq-check-%d-%d", os.Getpid(), time.Now().UnixNano())
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer unix.Close(lfd)
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: name}); err != nil {
		return fmt.Errorf("check: bind: %w", err)
	}
	if err := unix.Listen(lfd, 8); err != nil {
		return fmt.Errorf("check: listen: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(lfd, &st); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	// A: connects with other ids and groups, sends three pieces.
	a, err := connectAs(name)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer unix.Close(a)
	pid := os.Getpid()
	wantA := []UnixQueued{
		{Data: []byte("alpha"), PID: pid, UID: checkMsgUID, GID: checkMsgGID},
		{Data: []byte("beta-beta"), PID: pid},
	}
	if paged {
		big := make([]byte, 20000)
		for i := range big {
			big[i] = byte(i*7 + i>>8)
		}
		wantA = append(wantA, UnixQueued{Data: big, PID: pid})
	}
	// A last piece with a file in flight: the read end of a pipe this
	// process holds.
	var pp [2]int
	if err := unix.Pipe2(pp[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer unix.Close(pp[0])
	defer unix.Close(pp[1])
	wantA = append(wantA, UnixQueued{Data: []byte("delta"), PID: pid, Files: [][]FileHolder{{{pid, pp[0]}}}})
	cred := unix.UnixCredentials(&unix.Ucred{Pid: int32(pid), Uid: checkMsgUID, Gid: checkMsgGID})
	if err := unix.Sendmsg(a, wantA[0].Data, cred, nil, 0); err != nil {
		return fmt.Errorf("check: send: %w", err)
	}
	for _, m := range wantA[1:] {
		var oob []byte
		if m.Files != nil {
			oob = unix.UnixRights(pp[0])
		}
		if n, err := unix.SendmsgN(a, m.Data, oob, nil, 0); err != nil || n != len(m.Data) {
			return fmt.Errorf("check: send: %d, %v", n, err)
		}
	}
	var stA unix.Stat_t
	if err := unix.Fstat(a, &stA); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	// B: bound to a name, sends and closes.
	b, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	err = unix.Bind(b, &unix.SockaddrUnix{Name: name + "-b"})
	if err == nil {
		err = unix.Connect(b, &unix.SockaddrUnix{Name: name})
	}
	if err == nil {
		_, err = unix.Write(b, []byte("gamma"))
	}
	unix.Close(b)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	got, err := r.AcceptQueue(uint32(st.Ino))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnixMismatch, err)
	}
	want := []UnixConn{
		{Client: uint32(stA.Ino), Msgs: wantA},
		{Msgs: []UnixQueued{{Data: []byte("gamma"), PID: pid}}, Shutdown: 3, ClientName: name + "-b"},
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d connections read, 2 made: %w", len(got), ErrUnixMismatch)
	}
	for i := range want {
		s, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			return fmt.Errorf("check: accept: %w", err)
		}
		pc, err := peerCredOf(s)
		unix.Close(s)
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		want[i].Peer = pc
		if err := sameConn(got[i], want[i]); err != nil {
			return fmt.Errorf("connection %d: %w: %w", i+1, err, ErrUnixMismatch)
		}
	}
	if want[0].Peer.UID != checkUID || !slices.Equal(want[0].Peer.Groups, checkGroups) {
		return fmt.Errorf("check: the connector's ids did not change: %+v", want[0].Peer)
	}
	return nil
}

func sameConn(g, w UnixConn) error {
	switch {
	case g.Client != w.Client || g.ClientName != w.ClientName:
		return fmt.Errorf("client %d %q, want %d %q", g.Client, g.ClientName, w.Client, w.ClientName)
	case g.Shutdown != w.Shutdown || g.Err != 0:
		return fmt.Errorf("shutdown %d error %d, want %d, 0", g.Shutdown, g.Err, w.Shutdown)
	case g.Peer.PID != w.Peer.PID || g.Peer.UID != w.Peer.UID || g.Peer.GID != w.Peer.GID || !slices.Equal(g.Peer.Groups, w.Peer.Groups):
		return fmt.Errorf("peer %+v, SO_PEERCRED says %+v", g.Peer, w.Peer)
	case len(g.Msgs) != len(w.Msgs):
		return fmt.Errorf("%d pieces, want %d", len(g.Msgs), len(w.Msgs))
	}
	for i, m := range g.Msgs {
		x := w.Msgs[i]
		if len(m.Files) != len(x.Files) {
			return fmt.Errorf("piece %d: %d files in flight, want %d", i+1, len(m.Files), len(x.Files))
		}
		for k, hs := range x.Files {
			for _, h := range hs {
				if !slices.Contains(m.Files[k], h) {
					return fmt.Errorf("piece %d: file %d in flight held by %v, want %v among them", i+1, k+1, m.Files[k], h)
				}
			}
		}
		if !bytes.Equal(m.Data, x.Data) || m.PID != x.PID || m.UID != x.UID || m.GID != x.GID {
			return fmt.Errorf("piece %d: %d bytes from %d %d/%d, want %d bytes from %d %d/%d",
				i+1, len(m.Data), m.PID, m.UID, m.GID, len(x.Data), x.PID, x.UID, x.GID)
		}
	}
	return nil
}

// connectAs connects a new socket to name from a thread with the ids
// checkUID, checkGID and the groups checkGroups (the thread is locked
// and never unlocked: it ends with its goroutine).
func connectAs(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		const keep = ^uintptr(0)
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(checkGroups)), uintptr(unsafe.Pointer(&checkGroups[0])), 0); e != 0 {
			done <- fmt.Errorf("setgroups: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, checkGID, keep); e != 0 {
			done <- fmt.Errorf("setresgid: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, checkUID, keep); e != 0 {
			done <- fmt.Errorf("setresuid: %w", e)
			return
		}
		done <- unix.Connect(fd, &unix.SockaddrUnix{Name: name})
	}()
	if err := <-done; err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// peerCredOf reads SO_PEERCRED and SO_PEERGROUPS.
func peerCredOf(fd int) (PeerCred, error) {
	uc, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return PeerCred{}, err
	}
	c := PeerCred{PID: int(uc.Pid), UID: uc.Uid, GID: uc.Gid}
	buf := make([]byte, 4*256)
	n := uint32(len(buf))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
		return c, fmt.Errorf("SO_PEERGROUPS: %w", e)
	}
	for i := 0; i+4 <= int(n); i += 4 {
		c.Groups = append(c.Groups, binary.LittleEndian.Uint32(buf[i:]))
	}
	return c, nil
}

// VerifyPieces checks Pieces on a stream pair it makes in the caller's
// network namespace: pieces sent with credentials of its choosing, with
// two files in flight, without, with one file, the first partly read;
// what Pieces reads must be their lengths left, files and credentials.
// It is cheaper than Verify (no listener, no paged piece) and checks
// what Pieces reads besides the socket table and the queue walk: an
// sk_buff's length and what reads consumed of it, its files in flight
// and credentials.
func (r *UnixReader) VerifyPieces() error {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	var pp [2]int
	if err := unix.Pipe2(pp[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer unix.Close(pp[0])
	defer unix.Close(pp[1])
	// Every piece carries its sender's credentials.
	if err := unix.SetsockoptInt(p[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	pid := os.Getpid()
	sends := []struct {
		data  string
		files []int
		forge bool
	}{{"xkl", nil, true}, {"opq", pp[:], false}, {"rs", nil, false}, {"t", pp[:1], false}}
	want := make([]UnixPiece, len(sends))
	for i, s := range sends {
		var oob []byte
		if s.files != nil {
			oob = unix.UnixRights(s.files...)
		}
		want[i] = UnixPiece{Len: len(s.data), Files: len(s.files), PID: pid}
		if s.forge {
			oob = append(oob, unix.UnixCredentials(&unix.Ucred{Pid: int32(pid), Uid: checkMsgUID, Gid: checkMsgGID})...)
			want[i].UID, want[i].GID = checkMsgUID, checkMsgGID
		}
		if n, err := unix.SendmsgN(p[1], []byte(s.data), oob, nil, 0); err != nil || n != len(s.data) {
			return fmt.Errorf("check: send: %d, %v", n, err)
		}
	}
	// A read of the first byte: the first piece is partly consumed.
	if n, err := unix.Read(p[0], make([]byte, 1)); n != 1 || err != nil {
		return fmt.Errorf("check: read: %d, %v", n, err)
	}
	want[0].Len--
	var st unix.Stat_t
	if err := unix.Fstat(p[0], &st); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	got, err := r.Pieces(uint32(st.Ino))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnixMismatch, err)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("pieces %+v read, %+v queued: %w", got, want, ErrUnixMismatch)
	}
	return nil
}

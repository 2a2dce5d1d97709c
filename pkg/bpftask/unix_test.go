package bpftask

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openUnix loads the reader (closed when the test ends); the test is
// skipped on a kernel that cannot run it.
func openUnix(t *testing.T) *UnixReader {
	t.Helper()
	r, err := OpenUnix(nil)
	if errors.Is(err, ErrUnixUnavailable) {
		t.Skipf("reader: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// TestUnixVerify runs the UNIX accept queue reader's own check: what it
// reads of connections waiting in a listener's queue (a client with
// other ids and groups that sent pieces, one with credentials of its
// choosing, and a client that sent and closed) is what was sent and
// what SO_PEERCRED says once they are accepted; paged pieces too.
func TestUnixVerify(t *testing.T) {
	r := openUnix(t)
	start := time.Now()
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	t.Logf("verified in %v, paged pieces readable: %v", time.Since(start), r.pagedOK)
	if !r.pagedOK {
		t.Error("paged pieces not readable on this kernel")
	}
}

// TestUnixAcceptQueueMany reads a listener's queue of 300 connections,
// each with a short piece and one the kernel puts mostly in pages, every
// third client closed: every connection in order, every byte.
func TestUnixAcceptQueueMany(t *testing.T) {
	r := openUnix(t)
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("@ckpt-unixq-many-%d-%d", os.Getpid(), time.Now().UnixNano())
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: name}); err != nil {
		t.Fatal(err)
	}
	const n = 300
	if err := unix.Listen(lfd, n); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 500)
	want := make([]uint32, n)
	for i := range n {
		c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Connect(c, &unix.SockaddrUnix{Name: name}); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(c, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(c, big); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			unix.Close(c)
			continue
		}
		defer unix.Close(c)
		var st unix.Stat_t
		unix.Fstat(c, &st)
		want[i] = uint32(st.Ino)
	}
	var st unix.Stat_t
	if err := unix.Fstat(lfd, &st); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	conns, err := r.AcceptQueue(uint32(st.Ino))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections read in %v", len(conns), time.Since(start))
	if len(conns) != n {
		t.Fatalf("%d connections, want %d", len(conns), n)
	}
	for i, c := range conns {
		if c.Client != want[i] || len(c.Msgs) != 2 || string(c.Msgs[0].Data) != fmt.Sprint(i) || !bytes.Equal(c.Msgs[1].Data, big) ||
			c.Msgs[0].PID != os.Getpid() || c.Peer.PID != os.Getpid() {
			t.Fatalf("connection %d: client %d (want %d), %d pieces", i, c.Client, want[i], len(c.Msgs))
		}
	}
}

// TestUnixPieces runs the pieces reader's own check, then reads a stream
// queue holding a large send with a file in flight (the kernel cuts it
// into several pieces, the file on the first), a short one without, and
// an empty queue: the lengths add up to what SIOCINQ says, the file is on
// the first piece only. It logs what loading, checking and reading cost.
func TestUnixPieces(t *testing.T) {
	start := time.Now()
	r := openUnix(t)
	loaded := time.Now()
	if err := r.VerifyPieces(); err != nil {
		t.Fatal(err)
	}
	verified := time.Now()
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if err := unix.SetsockoptInt(p[1], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(p[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		t.Fatal(err)
	}
	ino := func(fd int) uint32 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return uint32(st.Ino)
	}
	empty, err := r.Pieces(ino(p[0]))
	if err != nil || len(empty) != 0 {
		t.Fatalf("empty queue: %+v, %v", empty, err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	if n, err := unix.SendmsgN(p[1], big, unix.UnixRights(p[1]), nil, 0); err != nil || n != len(big) {
		t.Fatalf("send: %d, %v", n, err)
	}
	if _, err := unix.Write(p[1], []byte("end")); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got, err := r.Pieces(ino(p[0]))
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(before)
	t.Logf("load %v, check %v, read %d pieces %v", loaded.Sub(start), verified.Sub(loaded), len(got), read)
	inq, err := unix.IoctlGetInt(p[0], unix.SIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, pc := range got {
		total += pc.Len
		if want := map[bool]int{true: 1, false: 0}[i == 0]; pc.Files != want || pc.PID != os.Getpid() {
			t.Errorf("piece %d: %+v, want %d files from %d", i+1, pc, want, os.Getpid())
		}
	}
	if len(got) < 3 || total != inq || got[len(got)-1].Len != 3 {
		t.Errorf("%d pieces of %d bytes in all (last %+v), want several, %d bytes, the last 3", len(got), total, got[len(got)-1], inq)
	}
}

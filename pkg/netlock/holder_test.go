package netlock

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
)

// holderEnv makes the test binary run as the holder process (StartHolder
// runs `EXE netlock-hold TABLE QUEUE NETNS`).
const holderEnv = "NETLOCK_TEST_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" && len(os.Args) == 5 && os.Args[1] == HoldCommand {
		if err := RunHolder(os.Args[2], os.Args[3], os.Args[4]); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The holder processes the tests start are this binary.
	os.Setenv(holderEnv, "1")
	os.Exit(m.Run())
}

// testNetns makes a network namespace of its own with lo up: removing any
// netfilter hook of a namespace drops every packet queued in it, and
// other tests take and lift locks in the caller's.
func testNetns(t *testing.T) (string, *os.File) {
	t.Helper()
	name := fmt.Sprintf("nfq-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	for _, args := range [][]string{{"netns", "add", name}, {"-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return name, f
}

// pair is a loopback connection made in a namespace: the server end is
// the "dumped" one, the client its peer.
type pair struct {
	client, server net.Conn
	conn           Conn // seen from the server
}

func newPair(t *testing.T, ns, network, addr string) *pair {
	t.Helper()
	p := &pair{}
	err := testenv.InNetNS(ns, func() error {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		if p.client, err = net.Dial(network, ln.Addr().String()); err != nil {
			return err
		}
		p.server, err = ln.Accept()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.client.Close(); p.server.Close() })
	p.conn = Conn{Local: netip.MustParseAddrPort(p.server.LocalAddr().String()), Remote: netip.MustParseAddrPort(p.server.RemoteAddr().String())}
	return p
}

// silent checks that nothing arrives on c for d, and that c was not reset.
func silent(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 16))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: got %d bytes, %v; want nothing (no data, no reset)", what, n, err)
	}
}

// readWithin reads want from c within d and returns how long it took.
func readWithin(t *testing.T, c net.Conn, want string, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("%s: read %q, %v; want %q within %v", what, buf, err, want, d)
	}
	return time.Since(start)
}

// TestHeldPacketsArriveOnRelease: with a holder (goroutines, a process
// like ckpt's, or goroutines when that process cannot start), what the peer sends during the lock is held, not
// let through, and reaches the socket as soon as the lock is released,
// long before the peer's backed-off retransmission; what the locked socket
// sends is dropped and retransmitted; nothing is reset.
func TestHeldPacketsArriveOnRelease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, network, addr, exe string
		noProcess                bool // the process cannot start: held by the caller
	}{
		{"goroutine/tcp4", "tcp4", "127.0.0.1:0", "", false},
		{"goroutine/tcp6", "tcp6", "[::1]:0", "", false},
		{"process/tcp4", "tcp4", "127.0.0.1:0", exe, false},
		{"process-fails/tcp4", "tcp4", "127.0.0.1:0", "/nonexistent/ckpt", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each in a network namespace of its own
			ns, nsf := testNetns(t)
			p := newPair(t, ns, tt.network, tt.addr)
			l, err := TakeHeld("held-test", []Conn{p.conn}, nsf, tt.exe)
			if err != nil {
				t.Fatal(err)
			}
			defer Release(l.Table, int(nsf.Fd()))
			if !l.Queued || l.HoldErr != nil {
				t.Fatalf("lock not queued: %v", l.HoldErr)
			}
			if err := l.HolderStarted(); (err != nil) != tt.noProcess {
				t.Fatalf("holder process started: %v", err)
			}
			sent := time.Now()
			if _, err := p.client.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := p.server.Write([]byte("pong")); err != nil {
				t.Fatal(err)
			}
			silent(t, p.server, 300*time.Millisecond, "peer to locked socket during the lock")
			silent(t, p.client, 300*time.Millisecond, "locked socket to peer during the lock")
			// Past the peer's third retransmission (0.2, 0.6, 1.4 s): the
			// next comes 3 s after the first send.
			time.Sleep(time.Until(sent.Add(1500 * time.Millisecond)))
			released := time.Now()
			if err := Release(l.Table, int(nsf.Fd())); err != nil {
				t.Fatal(err)
			}
			readWithin(t, p.server, "ping", 5*time.Second, "peer's bytes after release")
			if d := time.Since(released); d > time.Second {
				t.Errorf("the held bytes arrived %v after the release: they were dropped and retransmitted, not held", d)
			}
			readWithin(t, p.client, "pong", 10*time.Second, "locked socket's bytes after release (retransmitted)")
			// Still one connection, both ways.
			p.client.Write([]byte("more"))
			readWithin(t, p.server, "more", 5*time.Second, "after the lock")
		})
	}
}

// TestHolderKilledDrops: a lock whose holder process was killed drops the
// peer's packets (the queue has no listener and no bypass), never lets
// them through nor resets the connection; after the release the
// retransmission gets through.
func TestHolderKilledDrops(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ns, nsf := testNetns(t)
	p := newPair(t, ns, "tcp4", "127.0.0.1:0")
	name := fmt.Sprintf("killed-test-%d", os.Getpid())
	l, err := TakeHeld(name, []Conn{p.conn}, nsf, exe)
	if err != nil {
		t.Fatal(err)
	}
	defer Release(l.Table, int(nsf.Fd()))
	if !l.Queued {
		t.Fatalf("lock not queued: %v", l.HoldErr)
	}
	if err := l.HolderStarted(); err != nil {
		t.Fatal(err)
	}
	pid := testenv.FindPID(HoldCommand, l.Table)
	if pid == 0 {
		t.Fatal("holder process not found")
	}
	// The holder is this binary's child, reaped as soon as it exits
	// (spawnHolder's cmd.Wait): signalled through testenv.Signal, never
	// by a number it may have left to another package's process.
	if err := testenv.Signal(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); testenv.Signal(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("holder still there 10 s after SIGKILL")
		}
	}
	if _, err := p.client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	silent(t, p.server, 700*time.Millisecond, "peer to locked socket with its holder dead")
	if err := Release(l.Table, int(nsf.Fd())); err != nil {
		t.Fatal(err)
	}
	readWithin(t, p.server, "ping", 10*time.Second, "peer's bytes retransmitted after release")
}

// TestQueueNumbers: holders of two locks of a namespace bind two queues,
// and a new holder does not take the queue of a lock whose holder is gone
// (it would let that lock's packets through).
func TestQueueNumbers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	_, nsf := testNetns(t)
	ns := int(nsf.Fd())
	orphan, err := TakeQueued("orphan", []Conn{{Local: netip.MustParseAddrPort("192.0.2.1:1")}}, ns, QueueBase)
	if err != nil {
		t.Fatal(err)
	}
	defer Release(orphan.Table, ns)
	a, err := Hold(TablePrefix+"a", ns)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Hold(TablePrefix+"b", ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Queue == QueueBase || b.Queue == QueueBase || a.Queue == b.Queue {
		t.Fatalf("queues %d and %d; the orphan lock's is %d: want three different", a.Queue, b.Queue, QueueBase)
	}
}

// TestOpenOutgoing: once the outgoing direction is opened, the locked
// socket's packets reach the peer while the peer's stay held until the
// release.
func TestOpenOutgoing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	ns, nsf := testNetns(t)
	p := newPair(t, ns, "tcp4", "127.0.0.1:0")
	l, err := TakeHeld("outgoing-test", []Conn{p.conn}, nsf, "")
	if err != nil {
		t.Fatal(err)
	}
	defer Release(l.Table, int(nsf.Fd()))
	if err := OpenOutgoing(l.Table, int(nsf.Fd())); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.server.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	readWithin(t, p.client, "pong", 2*time.Second, "locked socket to peer, outgoing opened")
	silent(t, p.server, 300*time.Millisecond, "peer to locked socket, outgoing opened")
	if err := Release(l.Table, int(nsf.Fd())); err != nil {
		t.Fatal(err)
	}
	readWithin(t, p.server, "ping", 2*time.Second, "peer's bytes after release")
}

// TestReleaseUnread: a release lets through what the kernel queued even
// if the holder has not read it yet (a holder process still starting).
func TestReleaseUnread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	ns, nsf := testNetns(t)
	p := newPair(t, ns, "tcp4", "127.0.0.1:0")
	h, err := newHolder(TablePrefix+"unread-test", int(nsf.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := TakeQueued("unread-test", []Conn{p.conn}, int(nsf.Fd()), h.Queue)
	if err != nil {
		t.Fatal(err)
	}
	defer Release(l.Table, int(nsf.Fd()))
	if _, err := p.client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	// Past the peer's third retransmission (0.2, 0.6, 1.4 s): the next,
	// which would get through the opened lock, comes 3 s after the send.
	silent(t, p.server, 1500*time.Millisecond, "peer to locked socket")
	c, err := conn(int(nsf.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	openChains(c, table(l.Table)) // as Release does first
	if n, err := h.release(); err != nil || n != 0 {
		t.Fatalf("release: %d read, %v; want none read and no error", n, err)
	}
	readWithin(t, p.server, "ping", 700*time.Millisecond, "queued, unread, released")
	h.Close() // it serves no control socket: Release must not wait for it
}

// TestHolderProcessLifetime: the holder process keeps no fd it inherited
// by mistake (a pipe of whoever ran the dump, which a shell would wait
// on), and exits once its network namespace is abandoned (no process in
// it, no mount of it: a node torn down with a lock nobody restored),
// which its own sockets would otherwise keep alive. No socket of the test
// enters the namespace: a thread of it left there would count as a
// process in it.
func TestHolderProcessLifetime(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ns, nsf := testNetns(t)
	conn := Conn{Local: netip.MustParseAddrPort("192.0.2.1:1"), Remote: netip.MustParseAddrPort("192.0.2.2:2")}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], 0); err != nil { // inherited by children
		t.Fatal(err)
	}
	l, err := TakeHeld("lifetime-test", []Conn{conn}, nsf, exe)
	unix.CloseOnExec(pipe[0])
	unix.CloseOnExec(pipe[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := l.HolderStarted(); err != nil {
		t.Fatal(err)
	}
	pid := testenv.FindPID(HoldCommand, l.Table)
	if pid == 0 {
		t.Fatal("holder process not found")
	}
	defer testenv.Signal(pid, syscall.SIGKILL) // gone by then if the test passes: not by number
	unix.Close(pipe[1])
	r := os.NewFile(uintptr(pipe[0]), "pipe")
	defer r.Close()
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the pipe's write end stays open in the holder process: read %d, %v", n, err)
	}
	// The namespace goes from the view of every process (ip netns del);
	// the test's fd of it, and the holder's sockets, keep it alive.
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); testenv.Signal(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("holder still there 10 s after its network namespace was abandoned")
		}
	}
}

// TestManyHeldArriveOnRelease holds one packet of each of many
// connections (as a server's lock holds its clients' requests), every one
// read by the holder, and lets them through: the release leaves none in
// the kernel's queue, where the table's removal would drop them. A batch
// verdict naming an id the kernel took as before the first queued one
// let none through (TestHeldPacketsArriveOnRelease holds a few packets of
// one connection, which that did not show).
func TestManyHeldArriveOnRelease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("nftables needs root")
	}
	ns, nsf := testNetns(t)
	const n = 24
	var pairs []*pair
	var conns []Conn
	for i := 0; i < n; i++ {
		p := newPair(t, ns, "tcp4", "127.0.0.1:0")
		pairs, conns = append(pairs, p), append(conns, p.conn)
	}
	h, err := newHolder(TablePrefix+"many-test", int(nsf.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	go h.receive()
	l, err := TakeQueued("many-test", conns, int(nsf.Fd()), h.Queue)
	if err != nil {
		t.Fatal(err)
	}
	defer Release(l.Table, int(nsf.Fd()))
	for _, p := range pairs {
		if _, err := p.client.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		held := h.held
		h.mu.Unlock()
		if held >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder read %d packets, want %d", held, n)
		}
	}
	c, err := conn(int(nsf.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	openChains(c, table(l.Table)) // as Release does first
	if _, err := h.release(); err != nil {
		t.Fatal(err)
	}
	if q := queued(t, ns, h.Queue); q != 0 {
		t.Fatalf("%d packets still in the kernel's queue after the release: the table's removal would drop them", q)
	}
	for i, p := range pairs {
		readWithin(t, p.server, "ping", 5*time.Second, fmt.Sprintf("connection %d's held bytes after release", i))
	}
	h.Close() // it serves no control socket: Release must not wait for it
}

// queued reads how many packets the kernel holds in nfnetlink queue num
// of network namespace ns (/proc/net/netfilter/nfnetlink_queue:
// queue_total, the third column).
func queued(t *testing.T, ns string, num uint16) int {
	t.Helper()
	var b []byte
	if err := testenv.InNetNS(ns, func() (err error) {
		b, err = os.ReadFile("/proc/thread-self/net/netfilter/nfnetlink_queue")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == strconv.Itoa(int(num)) {
			q, _ := strconv.Atoi(f[2])
			return q
		}
	}
	t.Fatalf("queue %d not in %q", num, b)
	return 0
}

package e2e

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestTCPConnectingOutside restores a connection to a peer outside the
// dump made by a non-blocking connect never called again (the socket
// layer calls it connecting): the restored program's connect() returns 0
// once, then EISCONN, as it would have, and both ends get every byte. The
// restore connects for real behind the network lock and forges the
// peer's SYN-ACK: the peer must see neither that SYN nor the answer to
// the SYN-ACK (its network namespace, of its own, counts no SYN
// challenged and sends no reset).
func TestTCPConnectingOutside(t *testing.T) {
	e := setup(t)
	bin := compileC(t, "tcpconnecting.c")
	ns := privateNetNS(t, "ckpt-conn")
	var ln, port int
	tcpMust(t, testenv.InNetNS(ns, func() error {
		var err error
		if ln, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(ln, 1); err != nil {
			return err
		}
		sa, err := unix.Getsockname(ln)
		if err != nil {
			return err
		}
		port = sa.(*unix.SockaddrInet4).Port
		return nil
	}))
	defer unix.Close(ln)
	v := e.startLogged(t, "tcpconnecting", func(log string) []string {
		return []string{"ip", "netns", "exec", ns, bin, log, "127.0.0.1", strconv.Itoa(port)}
	})
	peer, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	tcpMust(t, err)
	defer unix.Close(peer)
	_, err = unix.Write(peer, []byte("world"))
	tcpMust(t, err)
	ready := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "ready") || strings.HasPrefix(l, "FAIL") })
	if !strings.HasPrefix(ready, "ready") {
		t.Fatalf("victim: %s", ready)
	}
	img := t.TempDir() + "/img"
	e.dumpKill(t, v, img)
	// The dump's checks of its BPF reader make and reset connections of
	// their own in the namespace: the resets count from here.
	rsts := netCounter(t, ns, "Tcp:OutRsts")
	if res := e.runRedoArgv(t, []string{"ip", "netns", "exec", ns, e.redo(), img}); res.code != 0 {
		t.Fatalf("ckpt-redo in %s: %v", ns, res)
	}
	e.r.MustSignal(t, v.pid, unix.SIGTERM)
	verdict := v.waitLine(t, func(l string) bool { return l == "PASS" || strings.HasPrefix(l, "FAIL") })
	if verdict != "PASS" {
		t.Fatalf("restored program: %s", verdict)
	}
	checkPeer(t, peer)
	checkCounters(t, ns, rsts)
}

// TestTCPConnectingPair is TestTCPConnectingOutside with the peer in the
// dump (the program's own loopback pair): the network lock holds what a
// peer of the tree receives, and must still drop the SYN of the real
// connect, which the peer would answer with a challenge ACK.
func TestTCPConnectingPair(t *testing.T) {
	for _, c := range []struct{ name, port string }{{"established", "0"}, {"close_wait", "-1"}} {
		t.Run(c.name, func(t *testing.T) { testTCPConnectingPair(t, c.port) })
	}
}

func testTCPConnectingPair(t *testing.T, port string) {
	e := setup(t)
	bin := compileC(t, "tcpconnecting.c")
	ns := privateNetNS(t, "ckpt-pair")
	v := e.startLogged(t, "tcpconnecting", func(log string) []string {
		return []string{"ip", "netns", "exec", ns, bin, log, "127.0.0.1", port}
	})
	ready := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "ready") || strings.HasPrefix(l, "FAIL") })
	if !strings.HasPrefix(ready, "ready") {
		t.Fatalf("victim: %s", ready)
	}
	// Twice: the second dump and restore are of a connection the first
	// restore connected so (a SYN held there went out at the release).
	for range 2 {
		img := t.TempDir() + "/img"
		e.dumpKill(t, v, img)
		rsts := netCounter(t, ns, "Tcp:OutRsts")
		if res := e.runRedoArgv(t, []string{"ip", "netns", "exec", ns, e.redo(), img}); res.code != 0 {
			t.Fatalf("ckpt-redo in %s: %v", ns, res)
		}
		checkCounters(t, ns, rsts)
	}
	e.r.MustSignal(t, v.pid, unix.SIGTERM)
	verdict := v.waitLine(t, func(l string) bool { return l == "PASS" || strings.HasPrefix(l, "FAIL") })
	if verdict != "PASS" {
		t.Fatalf("restored program: %s", verdict)
	}
}

// checkPeer reads what the restored program sent: "hello" before the
// dump, "after" once restored.
func checkPeer(t *testing.T, peer int) {
	t.Helper()
	tcpMust(t, unix.SetsockoptTimeval(peer, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10}))
	var got []byte
	for len(got) < 10 {
		buf := make([]byte, 16)
		n, err := unix.Read(peer, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("peer: read after %q: %d, %v", got, n, err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "helloafter" {
		t.Fatalf("peer read %q, want helloafter", got)
	}
}

// checkCounters checks that the network namespace ns saw no SYN
// challenged, no challenge ACK and no reset sent but rsts before.
func checkCounters(t *testing.T, ns string, rsts int) {
	t.Helper()
	for name, want := range map[string]int{"TcpExt:TCPSYNChallenge": 0, "TcpExt:TCPChallengeACK": 0, "Tcp:OutRsts": rsts} {
		if n := netCounter(t, ns, name); n != want {
			t.Errorf("%s %d in the network namespace, want %d", name, n, want)
		}
	}
}

// netCounter reads a counter ("TcpExt:TCPSYNChallenge", "Tcp:OutRsts") of
// the network namespace ns (/proc/net/netstat and snmp, read inside it).
func netCounter(t *testing.T, ns, name string) int {
	t.Helper()
	group, key, _ := strings.Cut(name, ":")
	for _, file := range []string{"netstat", "snmp"} {
		var b []byte
		tcpMust(t, testenv.InNetNS(ns, func() (err error) {
			b, err = os.ReadFile("/proc/thread-self/net/" + file)
			return err
		}))
		f := strings.NewReader(string(b))
		var keys []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) == 0 || fields[0] != group+":" {
				continue
			}
			if keys == nil {
				keys = fields
				continue
			}
			for i, k := range keys {
				if k == key && i < len(fields) {
					n, _ := strconv.Atoi(fields[i])
					return n
				}
			}
			keys = nil
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

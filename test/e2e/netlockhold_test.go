package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/netlock"
)

// TestNetLockHoldsRequests: a request a keep-alive client sends while its
// server is dumped (killed, its connections behind the lock) is answered as
// soon as the server is restored, not when the client's backed-off
// retransmission timer fires: the dump's holder process, which outlived
// the dump, kept it, and ckpt-redo let it through once the server ran
// (and let the answer out). Nothing of the lock is left afterwards.
//
// Server and client are in a network namespace of their own: the kernel
// drops every packet held in a namespace when any netfilter table of it
// goes (nf_queue_nf_hook_drop), and the other tests of the run (the
// fidelity suite's TCP cases, this package's) lift locks in the root one.
// The request is held when its answer needs no retransmission after the
// restore.
func TestNetLockHoldsRequests(t *testing.T) {
	e := setup(t)
	ns := privateNetNS(t, "ckpt-hold")
	const port = 7411
	srv := e.startLogged(t, "manyconns", func(log string) []string {
		return []string{"ip", "netns", "exec", ns, "python3", script(t, "manyconns.py"), log, strconv.Itoa(port)}
	})
	var c *net.TCPConn
	if err := testenv.InNetNS(ns, func() error {
		nc, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c = nc.(*net.TCPConn)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(msg string, deadline time.Time) {
		t.Helper()
		c.SetReadDeadline(deadline)
		if got, err := r.ReadString('\n'); err != nil || got != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	echo("hello\n", time.Now().Add(wait))
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, srv, img)
	tables := lockTablesIn(t, ns, srv.pid)
	if len(tables) != 1 {
		t.Fatalf("after the dump: lock tables %v in %s, want one", tables, ns)
	}
	if testenv.FindPID(netlock.HoldCommand, tables[0]) == 0 {
		t.Fatalf("no holder process for lock %s after the dump", tables[0])
	}
	sent := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	// The client retransmits while the server is down (0.2, 0.6, 1.4 s
	// after the send), each copy held too; its next one is 3 s after.
	time.Sleep(time.Until(sent.Add(1500 * time.Millisecond)))
	res := e.runRedoArgv(t, []string{"ip", "netns", "exec", ns, e.redo(), img})
	if res.code != 0 {
		t.Fatalf("ckpt-redo in %s: %v", ns, res)
	}
	if got := comm(srv.pid); got != srv.comm {
		t.Fatalf("restored server: comm %q, want %q", got, srv.comm)
	}
	restored := time.Now()
	before := totalRetrans(t, c)
	echo("ping\n", restored.Add(wait))
	if after := totalRetrans(t, c); after != before {
		t.Errorf("the request sent during the lock needed %d retransmissions after the restore (answered %v after it, %v after the send): dropped, not held",
			after-before, time.Since(restored), time.Since(sent))
	}
	for deadline := time.Now().Add(5 * time.Second); len(lockTablesIn(t, ns, srv.pid)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after the restore: network lock tables remain in %s: %v", ns, lockTablesIn(t, ns, srv.pid))
		}
	}
	for deadline := time.Now().Add(5 * time.Second); testenv.FindPID(netlock.HoldCommand, tables[0]) != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the holder of lock %s is still there 5 s after the restore", tables[0])
		}
	}
	if _, err := c.Write([]byte("again\n")); err != nil {
		t.Fatal(err)
	}
	echo("again\n", time.Now().Add(wait))
	e.killAndReap(t, srv)
}

// privateNetNS makes a network namespace with only lo (up), removed when
// the test ends.
func privateNetNS(t *testing.T, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1000000)
	for _, args := range [][]string{{"netns", "add", ns}, {"-n", ns, "link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		}
	}
	return ns
}

// lockTablesIn is lockTables in the network namespace ns.
func lockTablesIn(t *testing.T, ns string, pid int) []string {
	t.Helper()
	var ts []string
	err := testenv.InNetNS(ns, func() error {
		var err error
		ts, err = netlock.Tables()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range ts {
		if strings.HasPrefix(name, fmt.Sprintf("%s%d-", netlock.TablePrefix, pid)) {
			out = append(out, name)
		}
	}
	return out
}

// totalRetrans returns the number of segments the connection has
// retransmitted so far (TCP_INFO tcpi_total_retrans).
func totalRetrans(t *testing.T, c *net.TCPConn) uint32 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatalf("TCP_INFO: %v", ierr)
	}
	return info.Total_retrans
}

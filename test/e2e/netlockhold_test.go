package e2e

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/netlock"
)

// TestNetLockHoldsRequests: a request a keep-alive client sends while its
// server is dumped (killed, its connections behind the lock) is answered as
// soon as the server is restored, not when the client's backed-off
// retransmission timer fires: the dump's holder process, which outlived
// the dump, kept it, and ckpt-redo let it through once the server ran
// (and let the answer out). Nothing of the lock is left afterwards.
func TestNetLockHoldsRequests(t *testing.T) {
	e := setup(t)
	port := freePort(t)
	srv := e.startLogged(t, "manyconns", func(log string) []string {
		return []string{"python3", script(t, "manyconns.py"), log, strconv.Itoa(port)}
	})
	c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
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
	tables := lockTables(t, srv.pid)
	if len(tables) != 1 {
		t.Fatalf("after the dump: lock tables %v, want one", tables)
	}
	if testenv.FindPID(netlock.HoldCommand, tables[0]) == 0 {
		t.Fatalf("no holder process for lock %s after the dump", tables[0])
	}
	sent := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	// Past the client's third retransmission (0.2, 0.6, 1.4 s after the
	// send): its next one comes 3 s after the send.
	time.Sleep(time.Until(sent.Add(1500 * time.Millisecond)))
	e.restoreServer(t, srv, img)
	restored := time.Now()
	echo("ping\n", restored.Add(wait))
	if d := time.Since(restored); d > 500*time.Millisecond {
		t.Errorf("the request sent during the lock was answered %v after the restore (%v after it was sent): dropped and retransmitted, not held", d, time.Since(sent))
	}
	waitNoLock(t, srv.pid, "after the restore")
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

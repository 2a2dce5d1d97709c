package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// twoHosts makes two network namespaces joined by a veth pair, 10.231.N.1
// and 10.231.N.2: two "hosts" for tests of what crosses a network.
func twoHosts(t *testing.T) (a, b, addrA string) {
	t.Helper()
	id := time.Now().UnixNano() % 200
	a, b = fmt.Sprintf("ckpt-a-%d", id), fmt.Sprintf("ckpt-b-%d", id)
	va, vb := fmt.Sprintf("ckva%d", id), fmt.Sprintf("ckvb%d", id)
	addrA = fmt.Sprintf("10.231.%d.1", id)
	addrB := fmt.Sprintf("10.231.%d.2", id)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", a)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", a).Run() })
	run("netns", "add", b)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", b).Run() })
	run("link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b)
	run("-n", a, "addr", "add", addrA+"/24", "dev", va)
	run("-n", b, "addr", "add", addrB+"/24", "dev", vb)
	for _, ns := range []string{a, b} {
		run("-n", ns, "link", "set", "lo", "up")
	}
	run("-n", a, "link", "set", va, "up")
	run("-n", b, "link", "set", vb, "up")
	return a, b, addrA
}

// TestTCPAcrossHosts checkpoints a server in one network namespace (a
// "host") from ckpt in the root namespace, while clients in another one
// stream through a veth link: the network lock goes into the server's
// namespace, the server is restored there (ckpt-redo run in it), and the
// clients see every answer once, with no reset.
func TestTCPAcrossHosts(t *testing.T) {
	e := setup(t)
	hostA, hostB, addr := twoHosts(t)
	port := 7000 + int(time.Now().UnixNano()%1000)
	v := e.startLogged(t, "tcpserver", func(log string) []string {
		return []string{"ip", "netns", "exec", hostA, "python3", script(t, "tcpserver.py"), log, strconv.Itoa(port), addr}
	})
	dir := v.dir
	var clients []int
	var outs []string
	for i := 0; i < 2; i++ {
		out := filepath.Join(dir, fmt.Sprintf("client%d", i))
		outs = append(outs, out)
		clients = append(clients, e.r.Run(t, testenv.RunOpts{Stdout: out, Stderr: out}, "ip", "netns", "exec", hostB,
			"python3", script(t, "tcpclient.py"), strconv.Itoa(port), "4", addr))
	}
	waitSockets(t, v.pid, 3, "the echo server's listener and client connections")
	for i := 0; i < 2; i++ {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		time.Sleep(200 * time.Millisecond) // clients keep sending: dropped by the lock, retransmitted later
		res := e.runRedoArgv(t, []string{"ip", "netns", "exec", hostA, e.redo(), "--json", img})
		if res.code != 0 {
			t.Fatalf("cycle %d: ckpt-redo in %s: %v", i, hostA, res)
		}
		time.Sleep(400 * time.Millisecond) // deliberately: the clients talk to the restored server before the next cycle
	}
	for i, c := range clients {
		st := e.r.WaitExit(t, c, 60*time.Second)
		if out := readFile(outs[i]); st.Code != 0 || !strings.HasPrefix(out, "ok ") {
			t.Errorf("client %d: %v: %s", i, st, out)
		}
	}
	e.killAndReap(t, v)
}

// TestRewriteRules moves a connection whose both ends are in the dump (a
// parent and the child connected to it) to a new address with a rules
// file: after the restore it carries on, same sequence numbers, between the
// new endpoints; a rule that matches nothing is reported.
func TestRewriteRules(t *testing.T) {
	e := setup(t)
	id := time.Now().UnixNano() % 200
	ns := fmt.Sprintf("ckpt-mv-%d", id)
	oldAddr, newAddr := fmt.Sprintf("10.233.%d.1", id), fmt.Sprintf("10.233.%d.2", id)
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", oldAddr + "/32", "dev", "lo"},
		{"-n", ns, "addr", "add", newAddr + "/32", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		}
	}
	v := e.startLogged(t, "tcppair", func(log string) []string {
		return []string{"ip", "netns", "exec", ns, "python3", script(t, "tcppair.py"), log, oldAddr}
	})
	dir := v.dir
	lastAddr := func() string {
		a := ""
		for _, l := range v.lines() {
			if strings.Contains(l, "FAIL") {
				t.Fatalf("victim: %s", l)
			}
			if rest, ok := strings.CutPrefix(l, "addr "); ok {
				a = rest
			}
		}
		return a
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasPrefix(lastAddr(), oldAddr) {
		if time.Now().After(deadline) {
			t.Fatalf("no connection on %s; log:\n%s", oldAddr, tail(v.lines(), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	rules := filepath.Join(dir, "rules")
	if err := os.WriteFile(rules, []byte(fmt.Sprintf("# move the job\n%s %s\n10.99.99.99 10.99.99.98  # matches nothing\n", oldAddr, newAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	res := e.runRedoArgv(t, []string{"ip", "netns", "exec", ns, e.redo(), "--rules", rules, img})
	if res.code != 0 {
		t.Fatalf("ckpt-redo --rules: %v", res)
	}
	if !strings.Contains(res.stderr, "10.99.99.99") || !strings.Contains(res.stderr, "matches no endpoint") {
		t.Errorf("ckpt-redo: stderr %q, want a warning about the rule that matched nothing", res.stderr)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !strings.HasPrefix(lastAddr(), newAddr) {
		if time.Now().After(deadline) {
			t.Fatalf("the connection did not carry on between the new addresses; log:\n%s", tail(v.lines(), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a := lastAddr(); !strings.Contains(a, " "+newAddr+":") {
		t.Fatalf("connection now %s, want both ends on %s", a, newAddr)
	}
	e.killAndReap(t, v)
}

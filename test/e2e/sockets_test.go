package e2e

import (
	"bytes"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// sockPattern is byte i of the streams of testdata/fidelity/sock.h.
func sockPattern(seed uint64, i int) byte { return byte((uint64(i)*2654435761 + seed) >> 7) }

// TestSocketsOutsidePeer: a C client (testdata/victims/sock_peer.c) with
// options set holds a connection to the test, 1 MiB the test sent unread
// in its receive queue and megabytes it sent unread by the test in its
// send queue (sent and unsent). After a dump and restore, or two
// --leave-running dumps, the client finds its options and the MiB, and
// the test, the peer outside the dump, reads every byte it sent, then
// "end", then end of file: no reset, no byte lost or repeated.
func TestSocketsOutsidePeer(t *testing.T) {
	e := setup(t)
	bin := filepath.Join(t.TempDir(), "sock_peer")
	fid := filepath.Join(testenv.RepoRoot(t), "testdata", "fidelity")
	src := filepath.Join(testenv.VictimsDir(t), "sock_peer.c")
	if b, err := exec.Command("gcc", "-Wall", "-Werror", "-O1", "-I", fid, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	modes := []struct {
		name string
		run  func(t *testing.T, pid int)
	}{
		{"redo", func(t *testing.T, pid int) {
			img := filepath.Join(t.TempDir(), "img")
			if res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(pid)); res.code != 0 {
				t.Fatalf("dump: %v", res)
			}
			if es := e.r.WaitExit(t, pid, 10*time.Second); es.Signal != int(syscall.SIGKILL) {
				t.Fatalf("after the dump: %v, want killed", es)
			}
			time.Sleep(100 * time.Millisecond) // the peer's packets meet the lock meanwhile
			if res := e.runRedo(t, nil, img); res.code != 0 {
				t.Fatalf("ckpt-redo: %v", res)
			}
		}},
		{"leave-running-twice", func(t *testing.T, pid int) {
			for i := 0; i < 2; i++ {
				img := filepath.Join(t.TempDir(), "img")
				if res := e.runCkpt(t, nil, "dump", "--leave-running", "--dir", img, strconv.Itoa(pid)); res.code != 0 {
					t.Fatalf("dump %d: %v", i, res)
				}
			}
		}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			dir := t.TempDir()
			log := filepath.Join(dir, "log")
			port := ln.Addr().(*net.TCPAddr).Port
			pid := e.r.Run(t, testenv.RunOpts{Stderr: filepath.Join(dir, "stderr"), Dir: dir}, bin, log, strconv.Itoa(port))
			ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			in := make([]byte, 1<<20)
			for i := range in {
				in[i] = sockPattern(9, i)
			}
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write(in); err != nil {
				t.Fatalf("write the MiB: %v", err)
			}
			sent := -1
			deadline := time.Now().Add(20 * time.Second)
			for sent < 0 {
				lines := testenv.ReadLines(log)
				for _, l := range lines {
					if v, ok := strings.CutPrefix(l, "sent "); ok {
						sent, _ = strconv.Atoi(v)
					}
					if strings.HasPrefix(l, "FAIL") {
						t.Fatalf("before ready: %s", l)
					}
				}
				if sent < 0 && time.Now().After(deadline) {
					t.Fatalf("no ready line: %q", lines)
				}
				time.Sleep(10 * time.Millisecond)
			}
			m.run(t, pid)
			e.r.MustSignal(t, pid, syscall.SIGTERM)
			conn.SetDeadline(time.Now().Add(30 * time.Second))
			got, err := io.ReadAll(conn)
			if err != nil {
				t.Errorf("peer: read after %d bytes: %v (a reset?)", len(got), err)
			}
			if len(got) != sent+3 || !bytes.HasSuffix(got, []byte("end")) {
				t.Errorf("peer: read %d bytes, want the %d sent before the dump and \"end\"", len(got), sent)
			}
			for i := 0; i < min(sent, len(got)); i++ {
				if got[i] != sockPattern(5, i) {
					t.Errorf("peer: byte %d differs", i)
					break
				}
			}
			es := e.r.WaitExit(t, pid, 20*time.Second)
			lines := testenv.ReadLines(log)
			if len(lines) == 0 || lines[len(lines)-1] != "PASS" || es.Code != 0 {
				t.Errorf("client: %v; log %q", es, lines)
			}
			t.Logf("%s: %d bytes from the client's send queue, 1 MiB in its receive queue", m.name, sent)
		})
	}
}

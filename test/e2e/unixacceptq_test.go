package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestUnixAcceptQueue: a python server (testdata/unix_gated.py) holds
// UNIX connections of its own children in its listener's accept queue,
// each with the request its client sent, one whose client has exited.
// After a dump and a restore (and, the original going on, after a dump
// with --leave-running) the server accepts them in order: the requests
// are there, the clients get their answers, the closed one gives its
// request then end of file.
func TestUnixAcceptQueue(t *testing.T) {
	e := setup(t)
	for _, mode := range []string{"redo", "leave-running"} {
		t.Run(mode, func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "gate")
			v := e.startLogged(t, "unix_gated", func(log string) []string {
				return []string{"python3", script(t, "unix_gated.py"), log, gate}
			})
			v.waitLine(t, func(l string) bool { return l == "ready" })
			img := filepath.Join(t.TempDir(), "img")
			if mode == "redo" {
				if res := e.runCkpt(t, nil, "dump", "--dir", img, fmt.Sprint(v.pid)); res.code != 0 {
					t.Fatalf("dump: %v", res)
				}
				if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
					t.Fatalf("after the dump: %v, want killed", es)
				}
				if res := e.runRedo(t, nil, img); res.code != 0 {
					t.Fatalf("ckpt-redo: %v", res)
				}
			} else if res := e.runCkpt(t, nil, "dump", "--leave-running", "--dir", img, fmt.Sprint(v.pid)); res.code != 0 {
				t.Fatalf("dump --leave-running: %v", res)
			}
			openGate(t, gate)
			v.waitLine(t, func(l string) bool { return l == "done" })
			var got []string
			for _, l := range v.lines() {
				if strings.Contains(l, "FAIL") {
					t.Fatalf("%s", l)
				}
				if strings.HasPrefix(l, "served ") || strings.HasPrefix(l, "eof ") || strings.HasPrefix(l, "client ") {
					got = append(got, l)
				}
			}
			served := got[:0:0]
			for _, l := range got {
				if !strings.HasPrefix(l, "client ") {
					served = append(served, l)
				}
			}
			// Accepted in the order they connected.
			if want := []string{"served req 0", "served req 1", "served req 2", "eof bye"}; !slices.Equal(served, want) {
				t.Errorf("the server: %q, want %q", served, want)
			}
			for i := range 3 {
				if want := fmt.Sprintf("client %d got echo:req %d", i, i); !slices.Contains(got, want) {
					t.Errorf("no %q in %q", want, got)
				}
			}
		})
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTCPPortBound dumps a process with three TCP connections, one from a
// port of ip_local_port_range it bound by number, one bound with port 0,
// one whose port connect chose, restores it, and lets it check from the
// inside which ports its sockets keep once their connections are reset:
// only the one it bound (SOCK_BINDPORT_LOCK, which the dump reads with a
// BPF TCP iterator).
func TestTCPPortBound(t *testing.T) {
	e := setup(t)
	trigger := filepath.Join(t.TempDir(), "trigger")
	v := e.startLogged(t, "portbound", func(log string) []string {
		return []string{"python3", script(t, "portbound.py"), log, trigger}
	})
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	if res := e.runRedo(t, nil, img); res.code != 0 {
		t.Fatalf("ckpt-redo: %v", res)
	}
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "PASS") || strings.HasPrefix(l, "FAIL") })
	if !strings.HasPrefix(l, "PASS") {
		t.Errorf("restored process: %s", l)
	}
	e.killAndReap(t, v)
}

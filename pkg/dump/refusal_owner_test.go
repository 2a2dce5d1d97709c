package dump_test

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
)

// TestRefusalNamesOwner: a refused fd held by a child of the dumped root
// is named with the child's PID, not the root's (issue 9's CLI rough
// edge), and the refusal leaves both processes running, untraced.
func TestRefusalNamesOwner(t *testing.T) {
	testenv.RequireRoot(t)
	path := filepath.Join(t.TempDir(), "outside.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := testenv.StartReaper(t)
	// The root, a shell, waits for its child, which holds a UNIX socket
	// connected to the test: a peer outside the dump.
	root := r.Run(t, testenv.RunOpts{}, "sh", "-c",
		`python3 -c 'import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(1000)' "$0" & wait`, path)
	ln.SetDeadline(time.Now().Add(20 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("the child did not connect: %v", err)
	}
	defer conn.Close()
	kids, err := proc.Children(sys.PID(root))
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of the root %d: %v, %v", root, kids, err)
	}
	child := kids[0]

	sink, err := image.CreateDir(filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	_, err = dump.Run(sys.PID(root), sink, dump.Options{})
	runtime.UnlockOSThread()
	if !errors.Is(err, dump.ErrUnsupported) {
		t.Fatalf("dump of %d: %v; want a refusal", root, err)
	}
	if want := fmt.Sprintf("process %d (python3): fd 3 ", child); !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), fmt.Sprintf("process %d (sh): fd", root)) {
		t.Errorf("refusal %q; want it to name the child's fd (%q), not the root %d", err, want, root)
	}
	for _, pid := range []sys.PID{sys.PID(root), child} {
		st, err := proc.ReadStatus(pid)
		if err != nil {
			t.Fatalf("process %d after the refusal: %v", pid, err)
		}
		if st.TracerPID != 0 || st.State == 'T' || st.State == 't' {
			t.Errorf("process %d after the refusal: state %c, tracer %d", pid, st.State, st.TracerPID)
		}
	}
}

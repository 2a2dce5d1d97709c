package dump_test

import (
	"errors"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
)

// TestDumpSocketsNoLeak dumps the victim "sockets" (UNIX pairs with
// queues, files in flight, a listener with connections accepted and
// waiting, a UDP socket) in-process and checks that the dump closed every
// fd it took (its copies of the sockets and of the files in flight, the
// pidfds): the same fds are open in this process before and after, whether
// the dump succeeds (the victim left running, its own check passing) or
// refuses (a peer outside the dump; an epoll instance in flight, refused
// once ckpt has its copy).
func TestDumpSocketsNoLeak(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	for _, tc := range []struct {
		name    string
		arg     string // "outside": a peer outside the dump
		refusal string // in the error, "" if the dump succeeds
	}{
		{"dumped", "", ""},
		{"refused_outside", "outside", "outside the dump"},
		{"refused_in_flight", "epoll", "in flight cannot be restored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{tc.arg}
			switch tc.arg {
			case "":
				args = nil
			case "outside":
				path := filepath.Join(dir, "outside.sock")
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				args = []string{path}
			}
			v := testenv.StartVictim(t, r, "sockets", args...)
			before := testenv.OpenFDs(t) // the image's file too is closed by the end of Run
			sink, err := image.CreateDir(filepath.Join(dir, "img"))
			if err != nil {
				t.Fatal(err)
			}
			runtime.LockOSThread()
			_, err = dump.Run(sys.PID(v.PID), sink, dump.Options{LeaveRunning: true})
			runtime.UnlockOSThread()
			after := testenv.OpenFDs(t)
			switch {
			case tc.refusal != "" && (!errors.Is(err, dump.ErrUnsupported) || !strings.Contains(err.Error(), tc.refusal)):
				t.Fatalf("dump of %d: %v; want a refusal saying %q", v.PID, err, tc.refusal)
			case tc.refusal == "" && err != nil:
				t.Fatalf("dump of %d: %v", v.PID, err)
			}
			if !slices.Equal(before, after) {
				t.Errorf("fds of this process before the dump:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
			}
			v.WaitTicks(t, 2)
			v.Check(t)
		})
	}
}

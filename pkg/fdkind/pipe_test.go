package fdkind

import (
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// TestPipeRoundTrip: both ends of a pipe with data in it, one end
// non-blocking: the data is read without being consumed, the pipe is
// rebuilt once for both ends, and each end gets its own flags back.
func TestPipeRoundTrip(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(p[1], []byte("in flight")); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	r, w := describeOwn(t, env, p[0]), describeOwn(t, env, p[1])
	r.ID, w.ID = 1, 2
	held := []Held{{PID: sys.Getpid(), FD: sys.TargetFD(p[0]), File: r}, {PID: sys.Getpid(), FD: sys.TargetFD(p[1]), File: w}}
	if err := linkPipes(env, held); err != nil {
		t.Fatal(err)
	}
	if r.Pipe.External || w.Pipe.External || r.Pipe.DataID == 0 {
		t.Fatalf("pipe described as %+v / %+v", r.Pipe, w.Pipe)
	}
	// The data is still in the original pipe.
	var buf [64]byte
	nr := reopen(t, env, r)
	nw := reopen(t, env, w)
	n, err := unix.Read(p[0], buf[:])
	if err != nil || string(buf[:n]) != "in flight" {
		t.Fatalf("original pipe holds %q, %v", buf[:n], err)
	}
	if getfl(t, nr.Fd()) != unix.O_RDONLY|unix.O_NONBLOCK || getfl(t, nw.Fd()) != unix.O_WRONLY {
		t.Errorf("flags %#o %#o", getfl(t, nr.Fd()), getfl(t, nw.Fd()))
	}
	if _, err := nw.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	n, err = unix.Read(int(nr.Fd()), buf[:])
	if err != nil || string(buf[:n]) != "in flight!" {
		t.Fatalf("restored pipe holds %q, %v", buf[:n], err)
	}
}

// TestPipeOtherEndOutside: an end whose other end no fd of the dump
// holds is external, and its restore asks for --inherit-fd.
func TestPipeOtherEndOutside(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	env := newTestEnv(t)
	w := describeOwn(t, env, p[1])
	if err := linkPipes(env, []Held{{PID: sys.Getpid(), FD: sys.TargetFD(p[1]), File: w}}); err != nil {
		t.Fatal(err)
	}
	if !w.Pipe.External {
		t.Fatal("not external")
	}
	k, _ := Lookup(image.FilePipe)
	if _, err := k.Open(restoreEnv{env}, w, Where{PID: 1, FD: 5}); err == nil {
		t.Fatal("external pipe opened")
	}
}

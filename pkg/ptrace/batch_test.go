package ptrace

import (
	"os"
	"runtime"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// TestBatch runs batches of calls in a real tracee, in memory it maps
// with an injected call: the results come back in order (failures as
// negative errnos), the calls take effect, the registers and the
// signal mask are as before, a signal that arrives meanwhile is kept, and
// the tracee counts on once let go.
func TestBatch(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tr := startTracee(t)
	pid := tr.pid
	tid := pid.Leader()
	tr.waitCounting(t)
	if err := Seize(tid, OptExitKill); err != nil {
		t.Fatal(err)
	}
	stop(t, tid)
	in := &Injector{TID: tid, Gadget: vdsoGadget(t, pid)}
	const size = 64 << 10
	area, err := in.Call("mmap", unix.SYS_MMAP, 0, size, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
	if err != nil {
		t.Fatal(err)
	}
	before, err := GetRegs(tid)
	if err != nil {
		t.Fatal(err)
	}
	mask, _ := GetSigMask(tid)
	code, out := area, area+size/2
	cases := []struct {
		name  string
		calls func(b *Batch)
		want  func(t *testing.T, res []uint64)
	}{
		{"ids and a failure", func(b *Batch) {
			b.Add(unix.SYS_GETPID)
			b.Add(unix.SYS_CLOSE, ^uint64(0))
			b.Add(unix.SYS_GETPPID)
		}, func(t *testing.T, res []uint64) {
			if len(res) != 3 || sys.PID(res[0]) != pid || Errno(res[1]) != unix.EBADF || int(res[2]) != os.Getpid() {
				t.Errorf("results %#x, want [%d EBADF %d]", res, pid, os.Getpid())
			}
		}},
		{"effects in order", func(b *Batch) {
			b.Add(unix.SYS_PRCTL, unix.PR_SET_NAME, area+size-64)
			b.Add(unix.SYS_PRCTL, unix.PR_GET_NAME, area+size-32)
			b.Add(unix.SYS_PRCTL, unix.PR_SET_TIMERSLACK, 12345)
			b.Add(unix.SYS_PRCTL, unix.PR_GET_TIMERSLACK)
		}, func(t *testing.T, res []uint64) {
			name := make([]byte, 16)
			if err := ReadMem(pid, area+size-32, name); err != nil || string(name[:7]) != "batched" || res[3] != 12345 {
				t.Errorf("name %q (%v), timer slack %d", name, err, res[3])
			}
		}},
		{"many calls", func(b *Batch) {
			for i := 0; i < 200; i++ {
				b.Add(unix.SYS_GETPID)
			}
		}, func(t *testing.T, res []uint64) {
			for i, r := range res {
				if sys.PID(r) != pid {
					t.Fatalf("call %d: %d", i, r)
				}
			}
		}},
	}
	if err := WriteMem(pid, area+size-64, []byte("batched\x00")); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		var b Batch
		c.calls(&b)
		if c.name == "many calls" {
			// A signal that arrives while the batch runs is kept.
			unix.Tgkill(int(pid), int(tid), unix.SIGUSR2)
		}
		res, err := in.RunBatch(pid, &b, code, out)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		c.want(t, res)
		after, err := GetRegs(tid)
		if err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Errorf("%s: registers changed:\n%+v\n%+v", c.name, before, after)
		}
		if m, _ := GetSigMask(tid); m != mask {
			t.Errorf("%s: mask %#x, was %#x", c.name, m, mask)
		}
	}
	// An injected call still works after a batch, and the area goes.
	if _, err := in.Call("munmap", unix.SYS_MUNMAP, area, size); err != nil {
		t.Fatal(err)
	}
	if err := in.Park(); err != nil {
		t.Fatal(err)
	}
	if err := Detach(tid, 0); err != nil {
		t.Fatal(err)
	}
	tr.waitCounting(t)
}

// BenchmarkBatch measures a batch of 10 getpid calls, to compare with 10
// injected calls (BenchmarkInject).
func BenchmarkBatch(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tr := startTracee(b)
	if err := Seize(tr.pid.Leader(), 0); err != nil {
		b.Fatal(err)
	}
	stop(b, tr.pid.Leader())
	in := Injector{TID: tr.pid.Leader(), Gadget: vdsoGadget(b, tr.pid)}
	area, err := in.Call("mmap", unix.SYS_MMAP, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
	if err != nil {
		b.Fatal(err)
	}
	var batch Batch
	for i := 0; i < 10; i++ {
		batch.Add(unix.SYS_GETPID)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := in.RunBatch(tr.pid, &batch, area, area+1<<15); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	Detach(tr.pid.Leader(), 0)
}

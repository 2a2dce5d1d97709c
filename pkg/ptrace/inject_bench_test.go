package ptrace

import (
	"runtime"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// BenchmarkInject measures one injected system call (getpid) into a
// stopped tracee: what a dump pays per sigaction or timer it reads and a
// restore per mapping it makes.
func BenchmarkInject(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tr := startTracee(b)
	if err := Seize(tr.pid.Leader(), 0); err != nil {
		b.Fatal(err)
	}
	stop(b, tr.pid.Leader())
	in := Injector{TID: tr.pid.Leader(), Gadget: vdsoGadget(b, tr.pid)}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ret, err := in.Syscall(unix.SYS_GETPID)
		if err != nil || sys.PID(ret) != tr.pid {
			b.Fatalf("getpid: %d, %v", ret, err)
		}
	}
	b.StopTimer()
	if err := in.Park(); err != nil {
		b.Fatal(err)
	}
	Detach(tr.pid.Leader(), 0)
}

package ptrace

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// tracee is a running testdata/tracee.c.
type tracee struct {
	cmd           *exec.Cmd
	pid           sys.PID
	counter, text uint64 // addresses
}

// startTracee compiles testdata/tracee.c and starts it; it is killed at
// the end of the test.
func startTracee(t testing.TB) *tracee {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc (make deps)")
	}
	bin := filepath.Join(t.TempDir(), "tracee")
	if out, err := exec.Command("gcc", "-O1", "-o", bin, "testdata/tracee.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tr := &tracee{cmd: cmd, pid: sys.PID(cmd.Process.Pid)}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("tracee start line: %v", err)
	}
	if _, err := fmt.Sscanf(line, "%v %v", &tr.counter, &tr.text); err != nil {
		t.Fatalf("tracee start line %q: %v", line, err)
	}
	return tr
}

// readCounter reads the tracee's counter.
func (tr *tracee) readCounter(t testing.TB) uint64 {
	t.Helper()
	var b [8]byte
	if err := ReadMem(tr.pid, tr.counter, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// waitCounting waits until the counter moves.
func (tr *tracee) waitCounting(t testing.TB) {
	t.Helper()
	start := tr.readCounter(t)
	for deadline := time.Now().Add(10 * time.Second); tr.readCounter(t) == start; {
		if time.Now().After(deadline) {
			t.Fatal("the tracee does not count")
		}
		time.Sleep(time.Millisecond)
	}
}

// vdsoGadget finds a syscall instruction in the tracee's vDSO.
func vdsoGadget(t testing.TB, pid sys.PID) uint64 {
	t.Helper()
	maps, err := proc.ReadSmaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Path != "[vdso]" {
			continue
		}
		addr, ok, err := FindSyscall(pid, []Area{{m.Start, m.End}})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return addr
		}
	}
	t.Fatal("no syscall instruction in the vdso")
	return 0
}

// stop interrupts a seized tracee and waits for the interrupt stop.
func stop(t testing.TB, tid sys.TID) {
	t.Helper()
	if err := Interrupt(tid); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := Wait(tid)
		if err != nil {
			t.Fatal(err)
		}
		if st.Exited() {
			t.Fatalf("tracee %s", st)
		}
		if st.IsEventStop() {
			return
		}
		// A signal (SIGCHLD of an injected fork): suppress and go on.
		if err := Cont(tid, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTraceeLifecycle seizes a real process and goes through what a dump
// and a restore do to it. Every ptrace call comes from one OS thread, so
// there are no subtests (each would run on its own goroutine).
func TestTraceeLifecycle(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tr := startTracee(t)
	pid := tr.pid
	tid := pid.Leader()
	tr.waitCounting(t)

	if err := Seize(tid, OptExitKill|OptTraceFork); err != nil {
		t.Fatal(err)
	}
	stop(t, tid)

	// Registers and extended state, written back unchanged.
	regs, err := GetRegs(tid)
	if err != nil {
		t.Fatal(err)
	}
	if regs.Rip == 0 || regs.Rsp == 0 {
		t.Errorf("registers %+v", regs)
	}
	if err := SetRegs(tid, &regs); err != nil {
		t.Fatal(err)
	}
	xs, err := GetXState(tid)
	if err != nil {
		t.Fatal(err)
	}
	if len(xs) < 576 || XCR0(xs)&3 != 3 {
		t.Errorf("xstate of %d bytes, XCR0 %#x: want x87 and SSE at least", len(xs), XCR0(xs))
	}
	if err := SetXState(tid, xs); err != nil {
		t.Fatal(err)
	}
	if err := SetXState(tid, nil); err != nil {
		t.Errorf("empty xstate: %v", err)
	}

	// Signal mask and queued signals.
	mask, err := GetSigMask(tid)
	if err != nil {
		t.Fatal(err)
	}
	usr2 := uint64(1) << (unix.SIGUSR2 - 1)
	if mask&usr2 == 0 {
		t.Errorf("mask %#x lacks SIGUSR2", mask)
	}
	if err := SetSigMask(tid, mask|1<<(unix.SIGHUP-1)); err != nil {
		t.Fatal(err)
	}
	if m, err := GetSigMask(tid); err != nil || m != mask|1<<(unix.SIGHUP-1) {
		t.Errorf("mask after set: %#x, %v", m, err)
	}
	if err := SetSigMask(tid, mask); err != nil {
		t.Fatal(err)
	}
	if err := unix.Tgkill(int(pid), int(tid), unix.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(int(pid), unix.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	for _, shared := range []bool{false, true} {
		infos, err := PeekSigInfo(tid, shared)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 1 || len(infos[0]) != SigInfoSize || binary.LittleEndian.Uint32(infos[0]) != uint32(unix.SIGUSR2) {
			t.Errorf("queued (shared %v): %d signals, want one SIGUSR2", shared, len(infos))
		}
	}
	if info, err := GetSigInfo(tid); err != nil || len(info) != SigInfoSize {
		t.Errorf("siginfo of the stop: %d bytes, %v", len(info), err)
	}

	// rseq and seccomp.
	if rs, err := GetRseq(tid); err != nil || (rs.Ptr != 0 && rs.Size < 32) {
		t.Errorf("rseq %+v, %v", rs, err)
	}
	filters, err := GetSeccompFilters(tid)
	if err != nil {
		t.Fatal(err)
	}
	if len(filters) != 1 || len(filters[0]) != 8 {
		t.Errorf("seccomp filters %v, want the one allow-all instruction", filters)
	}
	if fl, err := GetSeccompFilterFlags(tid, 0); err != nil || fl != 0 {
		t.Errorf("seccomp filter 0 flags %#x, %v; want none", fl, err)
	}
	if _, err := GetSeccompFilterFlags(tid, 1); err == nil {
		t.Error("seccomp filter 1 has metadata; the tracee has one filter")
	}
	if mode, err := GetSyscallUserDispatchMode(tid); err != nil || mode != 0 {
		t.Errorf("syscall user dispatch mode %d, %v; want off", mode, err)
	}

	// Memory: read and write, also where the mapping is not writable.
	text := make([]byte, 21)
	if err := ReadMem(pid, tr.text, text); err != nil || string(text) != "hello from the tracee" {
		t.Fatalf("text %q, %v", text, err)
	}
	if err := WriteMem(pid, tr.text, []byte("HELLO")); err != nil {
		t.Fatal(err)
	}
	if err := ReadMem(pid, tr.text, text); err != nil || string(text) != "HELLO from the tracee" {
		t.Errorf("text after write %q, %v", text, err)
	}
	if ReadMem(pid, 0, text) == nil || WriteMem(pid, 8, text) == nil {
		t.Error("memory at address 0 accessible")
	}
	if ReadMem(pid, 0, nil) != nil || WriteMem(pid, 0, nil) != nil {
		t.Error("empty access failed")
	}

	// Injection through the vDSO gadget, single-stepping.
	in := &Injector{TID: tid, Gadget: vdsoGadget(t, pid)}
	before, _ := GetRegs(tid)
	if got, err := in.Syscall(unix.SYS_GETPID); err != nil || sys.PID(got) != pid {
		t.Fatalf("injected getpid = %d, %v; want %d", int64(got), err, pid)
	}
	if got, err := in.Call("getppid", unix.SYS_GETPPID); err != nil || int(got) != os.Getpid() {
		t.Errorf("injected getppid = %d, %v; want %d", int64(got), err, os.Getpid())
	}
	if _, err := in.Call("close", unix.SYS_CLOSE, 4242); !errors.Is(err, unix.EBADF) || !strings.Contains(err.Error(), "close") {
		t.Errorf("injected close of a bad fd: %v", err)
	}
	if after, _ := GetRegs(tid); after != before {
		t.Errorf("registers changed by injection:\n%+v\n%+v", before, after)
	}
	// A signal that arrives during a call is taken off and reported.
	if err := unix.Tgkill(int(pid), int(tid), unix.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	if got, err := in.Syscall(unix.SYS_GETTID); err != nil || sys.PID(got) != pid {
		t.Errorf("injected gettid = %d, %v", int64(got), err)
	}
	if len(in.Signals) != 1 || in.Signals[0].Sig != unix.SIGWINCH {
		t.Errorf("signals during the call: %+v, want SIGWINCH", in.Signals)
	}
	// A fork is reported, and its child is traced.
	child, err := in.Call("fork", unix.SYS_FORK)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Children) != 1 || in.Children[0] != sys.TID(child) {
		t.Errorf("children %v, fork returned %d", in.Children, child)
	}
	unix.Kill(int(child), unix.SIGKILL)
	for {
		st, err := Wait(sys.TID(child))
		if err != nil {
			t.Fatal(err)
		}
		if st.Exited() {
			break
		}
	}

	// A `syscall; int3` gadget in fresh executable memory, run without
	// single-stepping.
	page, err := in.Call("mmap", unix.SYS_MMAP, 0, 4096, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteMem(pid, page, []byte{0x0f, 0x05, 0xcc}); err != nil {
		t.Fatal(err)
	}
	trap := &Injector{TID: tid, Gadget: page}
	if got, err := trap.Syscall(unix.SYS_GETPID); err != nil || sys.PID(got) != pid {
		t.Errorf("getpid through syscall;int3 = %d, %v", int64(got), err)
	}
	// A gadget that is not one: the task stops elsewhere.
	if err := WriteMem(pid, page, []byte{0xcc, 0x90, 0x90}); err != nil {
		t.Fatal(err)
	}
	if _, err := trap.Syscall(unix.SYS_GETPID); err == nil || !strings.Contains(err.Error(), "not after the gadget") {
		t.Errorf("bad gadget: %v", err)
	}
	if err := SetRegs(tid, &before); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Call("munmap", unix.SYS_MUNMAP, page, 4096); err != nil {
		t.Fatal(err)
	}
	if err := in.Park(); err != nil {
		t.Fatal(err)
	}

	// Let it go: it counts again, untraced.
	if err := Detach(tid, 0); err != nil {
		t.Fatal(err)
	}
	tr.waitCounting(t)
	if err := Interrupt(tid); err == nil {
		t.Error("interrupting a detached task succeeded")
	}
}

// TestExitDuringTrace: a task killed while traced is reported as gone.
func TestExitDuringTrace(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tr := startTracee(t)
	if err := Seize(tr.pid.Leader(), 0); err != nil {
		t.Fatal(err)
	}
	stop(t, tr.pid.Leader())
	in := &Injector{TID: tr.pid.Leader(), Gadget: vdsoGadget(t, tr.pid)}
	if _, err := in.Syscall(unix.SYS_KILL, uint64(tr.pid), uint64(unix.SIGKILL)); !errors.Is(err, ErrExited) {
		t.Errorf("self-kill: %v, want ErrExited", err)
	}
	if _, err := GetRegs(tr.pid.Leader()); err == nil {
		t.Error("registers of a dead task")
	}
}

func TestErrors(t *testing.T) {
	const nobody = 1 << 30
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"seize", func() error { return Seize(nobody, 0) }, "ptrace seize"},
		{"interrupt", func() error { return Interrupt(nobody) }, "ptrace interrupt"},
		{"detach", func() error { return Detach(nobody, 0) }, "ptrace detach"},
		{"cont", func() error { return Cont(nobody, 0) }, "ptrace cont"},
		{"wait", func() error { _, err := Wait(nobody); return err }, "wait"},
		{"getregs", func() error { _, err := GetRegs(nobody); return err }, "ptrace getregs"},
		{"setregs", func() error { return SetRegs(nobody, &unix.PtraceRegs{}) }, "ptrace setregs"},
		{"getxstate", func() error { _, err := GetXState(nobody); return err }, "xstate"},
		{"setxstate", func() error { return SetXState(nobody, []byte{1}) }, "xstate"},
		{"getsigmask", func() error { _, err := GetSigMask(nobody); return err }, "getsigmask"},
		{"setsigmask", func() error { return SetSigMask(nobody, 0) }, "setsigmask"},
		{"peeksiginfo", func() error { _, err := PeekSigInfo(nobody, false); return err }, "peeksiginfo"},
		{"getsiginfo", func() error { _, err := GetSigInfo(nobody); return err }, "getsiginfo"},
		{"rseq", func() error { _, err := GetRseq(nobody); return err }, "rseq"},
		{"seccomp", func() error { _, err := GetSeccompFilters(nobody); return err }, "seccomp"},
		{"eventmsg", func() error { _, err := GetEventMsg(nobody); return err }, "geteventmsg"},
		{"seccomp metadata", func() error { _, err := GetSeccompFilterFlags(nobody, 0); return err }, "seccomp get metadata"},
		{"syscall user dispatch", func() error { _, err := GetSyscallUserDispatchMode(nobody); return err }, "syscall user dispatch"},
		{"inject", func() error {
			_, err := (&Injector{TID: nobody, Gadget: 4096}).Call("getpid", unix.SYS_GETPID)
			return err
		}, "getregs"},
		{"no gadget", func() error { _, err := (&Injector{TID: nobody}).Call("getpid", unix.SYS_GETPID); return err }, "no syscall instruction"},
		{"park", func() error { return (&Injector{TID: nobody}).Park() }, "interrupt"},
		{"read", func() error { return ReadMem(nobody, 4096, make([]byte, 8)) }, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func TestStop(t *testing.T) {
	stopped := func(sig unix.Signal, event int) unix.WaitStatus {
		return unix.WaitStatus(0x7f | int(sig)<<8 | event<<16)
	}
	tests := []struct {
		stop             Stop
		exited, evt, grp bool
		str              string
	}{
		{Stop{Status: 3 << 8}, true, false, false, "exited with 3"},
		{Stop{Status: unix.WaitStatus(unix.SIGKILL)}, true, false, false, "killed by killed"},
		{Stop{Status: stopped(unix.SIGTRAP, 0)}, false, false, false, "stopped by trace/breakpoint trap"},
		{Stop{Status: stopped(unix.SIGTRAP, unix.PTRACE_EVENT_STOP), Event: unix.PTRACE_EVENT_STOP}, false, true, false, "event 128 stop (trace/breakpoint trap)"},
		{Stop{Status: stopped(unix.SIGSTOP, unix.PTRACE_EVENT_STOP), Event: unix.PTRACE_EVENT_STOP}, false, true, true, "event 128 stop (stopped (signal))"},
		{Stop{Status: stopped(unix.SIGTTIN, unix.PTRACE_EVENT_STOP), Event: unix.PTRACE_EVENT_STOP}, false, true, true, "event 128 stop (stopped (tty input))"},
	}
	for _, tt := range tests {
		s := tt.stop
		if s.Exited() != tt.exited || s.IsEventStop() != tt.evt || s.IsGroupStop() != tt.grp || s.String() != tt.str {
			t.Errorf("%#x: exited %v event %v group %v %q; want %v %v %v %q", uint32(s.Status),
				s.Exited(), s.IsEventStop(), s.IsGroupStop(), s.String(), tt.exited, tt.evt, tt.grp, tt.str)
		}
	}
}

func TestErrno(t *testing.T) {
	tests := []struct {
		ret  uint64
		want error
	}{
		{0, nil},
		{42, nil},
		{^uint64(0) - 8, unix.EBADF}, // -9
		{^uint64(0), unix.EPERM},     // -1
		{^uint64(0) - 4095, nil},     // -4096: an address, not an errno
	}
	for _, tt := range tests {
		if got := Errno(tt.ret); got != tt.want && !errors.Is(got, tt.want) {
			t.Errorf("Errno(%#x) = %v, want %v", tt.ret, got, tt.want)
		}
	}
}

func TestXCR0AndBytes(t *testing.T) {
	if XCR0(make([]byte, 100)) != 0 {
		t.Error("XCR0 of a short buffer")
	}
	xs := make([]byte, 576)
	binary.LittleEndian.PutUint64(xs[464:], 0x2e7)
	if XCR0(xs) != 0x2e7 {
		t.Errorf("XCR0 = %#x", XCR0(xs))
	}
	v := struct{ A, B uint32 }{1, 2}
	if b := Bytes(&v); len(b) != 8 || b[0] != 1 || b[4] != 2 {
		t.Errorf("Bytes = %v", b)
	}
}

func TestFindSyscall(t *testing.T) {
	const size = 3 << 16
	mem := make([]byte, size)
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	at := func(off int) func() {
		return func() {
			clear(mem)
			if off >= 0 {
				mem[off], mem[off+1] = 0x0f, 0x05
			}
		}
	}
	tests := []struct {
		name  string
		setup func()
		areas []Area
		want  uint64
		ok    bool
	}{
		{"first chunk", at(100), []Area{{base, base + size}}, base + 100, true},
		{"across chunks", at(1<<16 - 1), []Area{{base, base + size}}, base + 1<<16 - 1, true},
		{"last chunk", at(size - 2), []Area{{base, base + size}}, base + size - 2, true},
		{"second area", at(size - 2), []Area{{base, base + 64}, {base + size - 64, base + size}}, base + size - 2, true},
		{"none", at(-1), []Area{{base, base + size}}, 0, false},
		{"no areas", at(100), nil, 0, false},
	}
	for _, tt := range tests {
		tt.setup()
		addr, ok, err := FindSyscall(sys.PID(os.Getpid()), tt.areas)
		if err != nil || ok != tt.ok || addr != tt.want {
			t.Errorf("%s: %#x, %v, %v; want %#x, %v", tt.name, addr, ok, err, tt.want, tt.ok)
		}
	}
	if _, _, err := FindSyscall(sys.PID(os.Getpid()), []Area{{0, 4096}}); err == nil {
		t.Error("unmapped area read without error")
	}
	runtime.KeepAlive(mem)
}

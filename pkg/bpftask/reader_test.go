package bpftask

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/ptrace"
)

// TestVerifyStopped reads a stopped process (sleep) both through ptrace
// and through the reader: every value must agree.
func TestVerifyStopped(t *testing.T) {
	r, err := Open(nil)
	if err != nil {
		t.Skipf("reader: %v", err)
	}
	defer r.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	tid := sys.TID(cmd.Process.Pid)
	// Once it sleeps, glibc has set up its thread.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", tid))
		if f := strings.Fields(string(b)); len(f) > 0 && f[0] == "230" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep does not sleep: %q", b)
		}
		time.Sleep(time.Millisecond)
	}
	if err := ptrace.Seize(tid, 0); err != nil {
		t.Fatal(err)
	}
	if err := ptrace.Interrupt(tid); err != nil {
		t.Fatal(err)
	}
	if _, err := ptrace.Wait(tid); err != nil {
		t.Fatal(err)
	}
	want := &Task{}
	if want.Regs, err = ptrace.GetRegs(tid); err != nil {
		t.Fatal(err)
	}
	if want.XState, err = ptrace.GetXState(tid); err != nil {
		t.Fatal(err)
	}
	rs, err := ptrace.GetRseq(tid)
	if err != nil {
		t.Fatal(err)
	}
	want.Rseq = Rseq{Ptr: rs.Ptr, Size: rs.Size, Sig: rs.Sig}
	want.AltStack.Flags = ssDisable
	// glibc's set_tid_address: the tid field of the main thread's struct
	// pthread, which the thread pointer (fs base) points to.
	got, err := r.Read(int(tid), want.XState)
	if err != nil {
		t.Fatal(err)
	}
	if d := int64(got.ClearTID) - int64(want.Regs.Fs_base); d <= 0 || d >= 4096 {
		t.Fatalf("clear_child_tid %#x, fs base %#x: not in the thread's struct pthread", got.ClearTID, want.Regs.Fs_base)
	}
	want.ClearTID = got.ClearTID
	if _, err := r.Verify(int(tid), want, 0); err != nil {
		t.Fatal(err)
	}
}

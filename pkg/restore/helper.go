package restore

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// The restore helper is a tiny static ELF program made here, in memory: a
// loop around pause(2), a `syscall; int3` gadget for injection, and a
// writable scratch page. It is single-threaded from its first instruction,
// which a Go child could never be, so it can safely be turned into anything.
const (
	helperBase    = 0x10000
	helperEntry   = helperBase + 64 + 56
	helperGadget  = helperEntry + 9
	helperScratch = helperBase + 0x1000
	helperMemSize = 0x2000
)

func helperELF() []byte {
	code := []byte{
		0xb8, 0x22, 0x00, 0x00, 0x00, // mov eax, SYS_pause
		0x0f, 0x05, // syscall
		0xeb, 0xf7, // jmp entry
		0x0f, 0x05, 0xcc, // gadget: syscall; int3
	}
	b := make([]byte, 64+56, 64+56+len(code))
	le := binary.LittleEndian
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // 64-bit, little endian, ELF version 1
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], 62)   // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], helperEntry)
	le.PutUint64(b[32:], 64) // program headers right after the ELF header
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 1)
	ph := b[64:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 7) // RWX
	le.PutUint64(ph[8:], 0) // offset
	le.PutUint64(ph[16:], helperBase)
	le.PutUint64(ph[24:], helperBase)
	le.PutUint64(ph[32:], uint64(64+56+len(code)))
	le.PutUint64(ph[40:], helperMemSize)
	le.PutUint64(ph[48:], 0x1000)
	return append(b, code...)
}

// helper is a running, seized restore helper.
type helper struct {
	pid sys.PID
	in  ptrace.Injector
	// pidfd holds the helper from its fork (our child, reaped by nobody
	// else): kill signals it through pidfd, not by a PID number an
	// injector's wait may have freed already, had the helper died.
	pidfd *sys.FD
}

// startHelper starts the helper with the given files at the given fd
// numbers (files[i] becomes fd i; nil entries are closed), seizes it and
// stops it. The helper dies with ckpt-redo (PR_SET_PDEATHSIG and
// PTRACE_O_EXITKILL), and so does everything it forks.
func startHelper(files []*os.File) (*helper, error) {
	mem, err := sys.MemfdCreate("ckpt-restore-helper", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	mfd := mem.Int()
	if _, err := unix.Write(mfd, helperELF()); err != nil {
		return nil, fmt.Errorf("write helper: %w", err)
	}
	attr := &syscall.ProcAttr{
		Env: []string{},
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	for _, f := range files {
		if f == nil {
			attr.Files = append(attr.Files, ^uintptr(0))
		} else {
			attr.Files = append(attr.Files, f.Fd())
		}
	}
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), mfd)
	raw, err := syscall.ForkExec(path, []string{"ckpt-restore-helper"}, attr)
	if err != nil {
		return nil, fmt.Errorf("start restore helper: %w", err)
	}
	pid := sys.PID(raw)
	tid := pid.Leader()
	h := &helper{pid: pid, in: ptrace.Injector{TID: tid, Gadget: helperGadget}}
	if h.pidfd, err = sys.PidfdOpen(pid, 0); err != nil {
		unix.Kill(raw, unix.SIGKILL) // our child, not reaped yet
		unix.Wait4(raw, nil, unix.WALL, nil)
		return nil, fmt.Errorf("restore helper: %w", err)
	}
	if err := ptrace.Seize(tid, ptrace.OptTraceFork|ptrace.OptTraceClone|ptrace.OptExitKill|ptrace.OptSuspendSeccomp); err != nil {
		h.kill()
		return nil, err
	}
	if err := ptrace.Interrupt(tid); err != nil {
		h.kill()
		return nil, err
	}
	for {
		st, err := ptrace.Wait(tid)
		if err != nil {
			h.kill()
			return nil, err
		}
		if st.Exited() {
			h.pidfd.Close()
			return nil, fmt.Errorf("restore helper %s", st)
		}
		if st.IsEventStop() {
			return h, nil
		}
		ptrace.Cont(tid, 0)
	}
}

// kill kills and reaps the helper.
func (h *helper) kill() {
	defer h.pidfd.Close()
	if err := sys.PidfdSendSignal(h.pidfd, unix.SIGKILL); err != nil {
		return // reaped already
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(int(h.pid), &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || ws.Exited() || ws.Signaled() {
			return
		}
	}
}

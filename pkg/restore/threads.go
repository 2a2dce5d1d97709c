package restore

// The threads of a process being built, each with its old TID, and what
// each has of its own. The dump side is pkg/dump/collect.go
// (collectThread) and procattrs.go.

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// threadMisc restores what each thread has of its own.
func (b *builder) threadMisc(i int) error {
	th, in := &b.p.Threads[i], b.ins[i]
	if err := b.writeString(scratchPathOff, th.Comm); err != nil {
		return err
	}
	if _, err := in.Call("prctl(PR_SET_NAME)", unix.SYS_PRCTL, unix.PR_SET_NAME, b.gadget+scratchPathOff); err != nil {
		return err
	}
	if th.Rseq.Ptr != 0 {
		if _, err := in.Call("rseq", unix.SYS_RSEQ, th.Rseq.Ptr, uint64(th.Rseq.Size), 0, uint64(th.Rseq.Sig)); err != nil {
			return err
		}
	}
	if th.Robust.Head != 0 {
		if _, err := in.Call("set_robust_list", unix.SYS_SET_ROBUST_LIST, th.Robust.Head, th.Robust.Len); err != nil {
			return err
		}
	}
	if _, err := in.Call("set_tid_address", unix.SYS_SET_TID_ADDRESS, th.ClearTID); err != nil {
		return err
	}
	if err := b.threadSched(i); err != nil {
		return err
	}
	if th.AltStack.Flags&ssDisable == 0 && th.AltStack.Size != 0 {
		ss := struct {
			SP    uint64
			Flags int32
			_     int32
			Size  uint64
		}{SP: th.AltStack.SP, Flags: th.AltStack.Flags &^ ssOnStack, Size: th.AltStack.Size}
		if err := b.write(scratchOff, ptrace.Bytes(&ss)); err != nil {
			return err
		}
		if _, err := in.Call("sigaltstack", unix.SYS_SIGALTSTACK, b.gadget+scratchOff, 0); err != nil {
			return err
		}
	}
	return nil
}

// createThreads clones every thread but the leader with its old TID. Each
// starts as a copy of the leader stopped at the gadget; its own registers
// are set at the end.
func (b *builder) createThreads() error {
	b.ins = []*ptrace.Injector{&b.in}
	const flags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM
	for _, th := range b.p.Threads[1:] {
		var args [cloneArgsSize + 8]byte
		le := binary.LittleEndian
		le.PutUint64(args[0:], flags)
		le.PutUint64(args[64:], b.gadget+scratchOff+cloneArgsSize) // set_tid
		le.PutUint64(args[72:], 1)
		le.PutUint32(args[cloneArgsSize:], uint32(th.TID))
		if err := b.write(scratchOff, args[:]); err != nil {
			return err
		}
		ret, err := b.in.Syscall(unix.SYS_CLONE3, b.gadget+scratchOff, cloneArgsSize)
		if err != nil {
			return err
		}
		if e := ptrace.Errno(ret); e != nil {
			if e == unix.EEXIST {
				return fmt.Errorf("clone3 thread with tid %d: %w", th.TID, ErrPIDInUse)
			}
			return fmt.Errorf("clone3 thread with tid %d: %w", th.TID, e)
		}
		if int(ret) != th.TID {
			return fmt.Errorf("clone3 gave tid %d, not %d", ret, th.TID)
		}
		b.tasks = append(b.tasks, th.TID)
		if err := waitNewTask(th.TID); err != nil {
			return err
		}
		b.ins = append(b.ins, &ptrace.Injector{TID: th.TID, Gadget: b.gadget})
	}
	return nil
}

// waitNewTask waits for the first stop of a task made by an injected clone.
func waitNewTask(tid int) error {
	for {
		st, err := ptrace.Wait(tid)
		if err != nil {
			return err
		}
		if st.Exited() {
			return fmt.Errorf("new task %d %s", tid, st)
		}
		if st.IsEventStop() {
			return nil
		}
		if err := ptrace.Cont(tid, 0); err != nil {
			return err
		}
	}
}

package restore

// The threads of a process being built, each with its old TID, and what
// each has of its own. The dump side is pkg/dump/collect.go
// (collectThread) and procattrs.go.

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// threadMisc restores what each thread has of its own: its name, rseq
// area, robust futex list, clear-child-tid address and alternate signal
// stack in one batch of calls, which also reads the speculation controls
// and machine-check policy the new thread has; then its scheduling
// attributes from outside, and the controls that differ.
func (b *builder) threadMisc(i int) error {
	th := &b.p.Threads[i]
	tb := b.batch(i)
	name, err := tb.put(append([]byte(th.Comm), 0))
	if err != nil {
		return err
	}
	tb.add("prctl(PR_SET_NAME)", unix.SYS_PRCTL, unix.PR_SET_NAME, name)
	if th.Rseq.Ptr != 0 {
		tb.add("rseq", unix.SYS_RSEQ, th.Rseq.Ptr, uint64(th.Rseq.Size), 0, uint64(th.Rseq.Sig))
	}
	if th.Robust.Head != 0 {
		tb.add("set_robust_list", unix.SYS_SET_ROBUST_LIST, th.Robust.Head, th.Robust.Len)
	}
	tb.add("set_tid_address", unix.SYS_SET_TID_ADDRESS, th.ClearTID)
	if th.AltStack.Flags&ssDisable == 0 && th.AltStack.Size != 0 {
		ss := struct {
			SP    uint64
			Flags int32
			_     int32
			Size  uint64
		}{SP: th.AltStack.SP, Flags: th.AltStack.Flags &^ ssOnStack, Size: th.AltStack.Size}
		addr, err := tb.put(ptrace.Bytes(&ss))
		if err != nil {
			return err
		}
		tb.add("sigaltstack", unix.SYS_SIGALTSTACK, addr, 0)
	}
	cur := threadControls{spec: make([]int, len(th.SpecCtrl))}
	for w, want := range th.SpecCtrl {
		cur.spec[w] = -1
		if want >= 0 {
			cur.spec[w] = tb.addAny(unix.SYS_PRCTL, unix.PR_GET_SPECULATION_CTRL, uint64(w), 0, 0, 0)
		}
	}
	cur.mce = tb.add("prctl(PR_MCE_KILL_GET)", unix.SYS_PRCTL, unix.PR_MCE_KILL_GET, 0, 0, 0, 0)
	res, err := tb.run()
	if err != nil {
		return err
	}
	return b.threadSched(i, cur.values(res))
}

// threadControls holds the indices in a batch's results of the
// speculation controls (-1: not asked) and machine-check policy a new
// thread has, and then their values.
type threadControls struct {
	spec []int
	mce  int
}

func (c threadControls) values(res []uint64) threadControls {
	out := threadControls{spec: make([]int, len(c.spec)), mce: int(res[c.mce])}
	for w, k := range c.spec {
		out.spec[w] = -1
		if k >= 0 {
			out.spec[w] = int(int32(res[k])) // an errno differs from every value wanted
		}
	}
	return out
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

// Where a threadBatch keeps what its calls point to, its results and its
// code, in the gadget area (the scratch offsets the single calls use lie
// below batchOutOff; a batch runs between two of them, never during one).
const (
	batchDataOff = scratchOff
	batchOutOff  = 10 * image.PageSize
	batchCodeOff = 11 * image.PageSize
	batchMax     = (gadgetSize - batchCodeOff - 64) / 82 // calls that fit the code pages
)

// A threadBatch collects the calls to make in one thread of a process
// being built, and the data they point to, and makes them in one go
// (ptrace.Batch): one ptrace stop for all instead of two for each.
type threadBatch struct {
	b     *builder
	in    *ptrace.Injector
	calls ptrace.Batch
	names []string // "" for a call whose result the caller checks
	data  uint64   // next free offset for data
	res   []uint64 // results of the calls run so far (flushes included)
	err   error    // the first error, returned by run
}

// batch starts a batch of calls for thread i.
func (b *builder) batch(i int) *threadBatch {
	return &threadBatch{b: b, in: b.ins[i], data: batchDataOff}
}

// put copies data into the gadget area for a call of the batch and
// returns its address there. When the area is full the calls so far
// are made first.
func (tb *threadBatch) put(data []byte) (uint64, error) {
	n := (uint64(len(data)) + 15) &^ 15
	if tb.data+n > batchOutOff {
		if err := tb.flush(); err != nil {
			return 0, err
		}
		if tb.data+n > batchOutOff {
			return 0, fmt.Errorf("%d bytes of call data: more than the batch area holds", len(data))
		}
	}
	off := tb.data
	if err := tb.b.write(off, data); err != nil {
		return 0, err
	}
	tb.data += n
	return tb.b.gadget + off, nil
}

// add appends a call whose failure is an error naming it, and returns
// its index in the results.
func (tb *threadBatch) add(name string, nr uint64, args ...uint64) int {
	if tb.calls.Len() == batchMax {
		tb.flush() // an error is kept for run
	}
	tb.names = append(tb.names, name)
	tb.calls.Add(nr, args...)
	return len(tb.res) + tb.calls.Len() - 1
}

// addAny appends a call whose result the caller checks.
func (tb *threadBatch) addAny(nr uint64, args ...uint64) int { return tb.add("", nr, args...) }

// flush makes the calls so far.
func (tb *threadBatch) flush() error {
	if tb.err != nil {
		return tb.err
	}
	tb.err = tb.runCalls()
	return tb.err
}

func (tb *threadBatch) runCalls() error {
	b := tb.b
	res, err := tb.in.RunBatch(b.target, &tb.calls, b.gadget+batchCodeOff, b.gadget+batchOutOff)
	if err != nil {
		return err
	}
	names := tb.names
	tb.calls.Reset()
	tb.names = nil
	tb.data = batchDataOff
	tb.res = append(tb.res, res...)
	for k, r := range res {
		if e := ptrace.Errno(r); e != nil && names[k] != "" {
			return fmt.Errorf("%s in %d: %w", names[k], tb.in.TID, e)
		}
	}
	return nil
}

// run makes the calls left and returns the results of all.
func (tb *threadBatch) run() ([]uint64, error) {
	if err := tb.flush(); err != nil {
		return nil, err
	}
	return tb.res, nil
}

package restore

// The threads of a process being built, each with its old TID, and what
// each has of its own. The dump side is pkg/dump/collect.go
// (collectThread) and procattrs.go.

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// threadsMisc restores what each thread has of its own: its name, rseq
// area, robust futex list, clear-child-tid address and alternate signal
// stack in one batch of calls for each thread (the batches of a wave of
// threads run at the same time), which also reads the speculation
// controls and machine-check policy the new thread has; then its
// scheduling attributes from outside, and the controls that differ.
func (b *builder) threadsMisc() error {
	cur := make([]threadControls, len(b.ins))
	return b.inWaves(func(i int, tb *threadBatch) bool {
		var ok bool
		cur[i], ok = b.askThreadMisc(i, tb)
		return ok
	}, func(i int, res []uint64) error {
		return b.threadSched(i, cur[i].values(res))
	})
}

// askThreadMisc fills tb for threadsMisc; false if the data do not fit.
func (b *builder) askThreadMisc(i int, tb *threadBatch) (threadControls, bool) {
	th := &b.p.Threads[i]
	name := append([]byte(th.Comm), 0)
	if !tb.fits(len(name) + 32 + image.MemPolicyMaxNode/8) {
		return threadControls{}, false
	}
	addr, err := tb.put(name)
	if err != nil {
		tb.err = err
		return threadControls{}, true
	}
	tb.add("prctl(PR_SET_NAME)", unix.SYS_PRCTL, unix.PR_SET_NAME, addr)
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
			tb.err = err
			return threadControls{}, true
		}
		tb.add("sigaltstack", unix.SYS_SIGALTSTACK, addr, 0)
	}
	if err := threadPolicy(tb, th); err != nil {
		tb.err = err
		return threadControls{}, true
	}
	cur := threadControls{spec: make([]int, len(th.SpecCtrl))}
	for w, want := range th.SpecCtrl {
		cur.spec[w] = -1
		if want >= 0 {
			cur.spec[w] = tb.addAny(unix.SYS_PRCTL, unix.PR_GET_SPECULATION_CTRL, uint64(w), 0, 0, 0)
		}
	}
	cur.mce = tb.add("prctl(PR_MCE_KILL_GET)", unix.SYS_PRCTL, unix.PR_MCE_KILL_GET, 0, 0, 0, 0)
	return cur, true
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
// are set at the end. The clones are injected one by one, not batched:
// each makes the leader stop at a clone event, which a batch would wait
// for by polling (slow on a loaded machine), an injected call blocking.
func (b *builder) createThreads() error {
	b.ins = []*ptrace.Injector{&b.in}
	for _, th := range b.p.Threads[1:] {
		if err := b.cloneThread(th.TID); err != nil {
			return err
		}
		b.tasks = append(b.tasks, th.TID)
		b.ins = append(b.ins, &ptrace.Injector{TID: th.TID, Gadget: b.gadget})
	}
	// The new threads' first stops, waited for together.
	for _, th := range b.p.Threads[1:] {
		if err := waitNewTask(th.TID); err != nil {
			return err
		}
	}
	return nil
}

// cloneThread clones a thread of the process with TID tid (injected clone3
// in the leader). It starts as a copy of the leader stopped at the gadget;
// wait for its first stop with waitNewTask.
func (b *builder) cloneThread(tid sys.TID) error {
	const flags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM
	var args [cloneArgsSize + 8]byte
	le := binary.LittleEndian
	le.PutUint64(args[0:], flags)
	le.PutUint64(args[64:], b.gadget+scratchOff+cloneArgsSize) // set_tid
	le.PutUint64(args[72:], 1)
	le.PutUint32(args[cloneArgsSize:], uint32(tid))
	if err := b.write(scratchOff, args[:]); err != nil {
		return err
	}
	ret, err := b.in.Syscall(unix.SYS_CLONE3, b.gadget+scratchOff, cloneArgsSize)
	if err != nil {
		return err
	}
	if e := ptrace.Errno(ret); e != nil {
		if e == unix.EEXIST {
			return fmt.Errorf("clone3 thread with tid %d: %w", tid, ErrPIDInUse)
		}
		return fmt.Errorf("clone3 thread with tid %d: %w", tid, e)
	}
	if sys.TID(ret) != tid {
		return fmt.Errorf("clone3 gave tid %d, not %d", ret, tid)
	}
	return nil
}

// waitNewTask waits for the first stop of a task made by an injected clone.
func waitNewTask(tid sys.TID) error {
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

// A batchRegion is where in the gadget area a threadBatch keeps what its
// calls point to (data up to dataEnd), its results (out) and its code
// (offsets). The scratch offsets the single calls use lie in the whole
// region; a batch never runs during one of them.
type batchRegion struct {
	data, dataEnd, out, code uint64
	maxCalls                 int
}

// wholeRegion is the region of a batch that runs alone; slot(k) that of
// the k-th thread of a wave, whose batches run at the same time.
var wholeRegion = batchRegion{data: scratchOff, dataEnd: 10 * image.PageSize, out: 10 * image.PageSize, code: 11 * image.PageSize,
	maxCalls: (gadgetSize - 11*image.PageSize - 64) / 82}

const (
	slotSize   = 2 << 10
	slotData   = 512
	slotOut    = 256
	waveSlots  = (gadgetSize - scratchOff) / slotSize
	slotMaxRes = slotOut/8 - 1
)

func slot(k int) batchRegion {
	base := uint64(scratchOff + k*slotSize)
	return batchRegion{data: base, dataEnd: base + slotData, out: base + slotData, code: base + slotData + slotOut,
		maxCalls: min(slotMaxRes, (slotSize-slotData-slotOut-64)/82)}
}

// A threadBatch collects the calls to make in one thread of a process
// being built, and the data they point to, and makes them in one go
// (ptrace.Batch): one ptrace stop for all instead of two for each. When
// its region is full the calls so far are made first.
type threadBatch struct {
	b       *builder
	in      *ptrace.Injector
	reg     batchRegion
	calls   ptrace.Batch
	names   []string // "" for a call whose result the caller checks
	data    uint64   // next free offset for data
	res     []uint64 // results of the calls made so far
	running *ptrace.RunningBatch
	err     error // the first error, returned by run
}

// batch starts a batch of calls for thread i in region reg.
func (b *builder) batch(i int, reg batchRegion) *threadBatch {
	return &threadBatch{b: b, in: b.ins[i], reg: reg, data: reg.data}
}

// fits tells whether data of n bytes fit the region at all.
func (tb *threadBatch) fits(n int) bool { return tb.reg.data+uint64(n+15)&^15 <= tb.reg.dataEnd }

// put copies data into the gadget area for a call of the batch and
// returns its address there.
func (tb *threadBatch) put(data []byte) (uint64, error) {
	n := (uint64(len(data)) + 15) &^ 15
	if tb.data+n > tb.reg.dataEnd {
		if err := tb.flush(); err != nil {
			return 0, err
		}
		if tb.data+n > tb.reg.dataEnd {
			return 0, fmt.Errorf("%d bytes of call data: more than a batch holds", len(data))
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
	if tb.calls.Len() == tb.reg.maxCalls {
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
	tb.start()
	return tb.finish()
}

// start starts the calls so far; finish waits for them.
func (tb *threadBatch) start() {
	if tb.err != nil || tb.calls.Len() == 0 {
		return
	}
	b := tb.b
	tb.running, tb.err = tb.in.StartBatch(b.target, &tb.calls, b.gadget+tb.reg.code, b.gadget+tb.reg.out)
}

func (tb *threadBatch) finish() error {
	if tb.err != nil || tb.running == nil {
		tb.drop()
		return tb.err
	}
	res, err := tb.running.Finish()
	names := tb.names
	tb.drop()
	if err != nil {
		tb.err = err
		return err
	}
	tb.res = append(tb.res, res...)
	for k, r := range res {
		if e := ptrace.Errno(r); e != nil && names[k] != "" {
			tb.err = fmt.Errorf("%s in %d: %w", names[k], tb.in.TID, e)
			return tb.err
		}
	}
	return nil
}

// drop forgets the calls asked so far.
func (tb *threadBatch) drop() {
	tb.running = nil
	tb.calls.Reset()
	tb.names = nil
	tb.data = tb.reg.data
}

// run makes the calls left and returns the results of all.
func (tb *threadBatch) run() ([]uint64, error) {
	if err := tb.flush(); err != nil {
		return nil, err
	}
	return tb.res, nil
}

// inWaves runs, for the threads of the process in waves of waveSlots,
// ask(i, tb) to fill a batch for thread i in its slot (false: thread i
// is done alone afterwards, by ask with the whole region), starts the
// batches of a wave together, and calls then(i, results) for each once
// all of the wave are done.
func (b *builder) inWaves(ask func(i int, tb *threadBatch) bool, then func(i int, res []uint64) error) error {
	var alone []int
	for w := 0; w < len(b.ins); w += waveSlots {
		n := min(waveSlots, len(b.ins)-w)
		batches := make([]*threadBatch, n)
		for k := range batches {
			tb := b.batch(w+k, slot(k))
			if !ask(w+k, tb) {
				alone = append(alone, w+k)
				continue
			}
			batches[k] = tb
			tb.start()
		}
		var err error
		for _, tb := range batches {
			if tb != nil {
				if ferr := tb.finish(); ferr != nil && err == nil {
					err = ferr
				}
			}
		}
		if err != nil {
			return err
		}
		for k, tb := range batches {
			if tb != nil {
				if err := then(w+k, tb.res); err != nil {
					return fmt.Errorf("thread %d: %w", b.p.Threads[w+k].TID, err)
				}
			}
		}
	}
	for _, i := range alone {
		tb := b.batch(i, wholeRegion)
		if !ask(i, tb) {
			return fmt.Errorf("thread %d: its calls do not fit a batch", b.p.Threads[i].TID)
		}
		res, err := tb.run()
		if err == nil {
			err = then(i, res)
		}
		if err != nil {
			return fmt.Errorf("thread %d: %w", b.p.Threads[i].TID, err)
		}
	}
	return nil
}

package dump

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

const (
	scratchSize     = 512
	redZone         = 128
	prGetTIDAddress = 40
)

// remote runs injected calls in one thread, with a scratch buffer below its
// stack pointer (past the red zone) whose old content is put back after.
type remote struct {
	in      ptrace.Injector
	pid     sys.PID
	scratch uint64
	saved   []byte
	err     error // the first error of ask
}

func (d *dumper) newRemote(tid sys.TID, gadget uint64) (*remote, error) {
	regs, err := ptrace.GetRegs(tid)
	if err != nil {
		return nil, err
	}
	r := &remote{in: ptrace.Injector{TID: tid, Gadget: gadget}, pid: d.rd()}
	r.scratch = (regs.Rsp - redZone - scratchSize) &^ 63
	r.saved = make([]byte, scratchSize)
	if err := readMem(d.rd(), r.scratch, r.saved); err != nil {
		return nil, fmt.Errorf("thread %d: read stack below %#x: %w", tid, regs.Rsp, err)
	}
	return r, nil
}

// block blocks every signal of the thread for its injection window: no
// signal is taken off a queue (and so changed) while the calls run. done
// puts the process's own mask back.
func (r *remote) block() error { return ptrace.SetSigMask(r.in.TID, ^uint64(0)) }

// done puts the scratch memory back, parks the thread in an interrupt
// stop (see ptrace.Injector.Park), puts its signal mask back and hands over
// signals that arrived anyway (SIGSTOP, which cannot be blocked).
func (r *remote) done(t *task) error {
	err := ptrace.WriteMem(r.pid, r.scratch, r.saved)
	if perr := r.in.Park(); err == nil {
		err = perr
	}
	if merr := ptrace.SetSigMask(t.tid, t.mask); err == nil {
		err = merr
	}
	t.signals = append(t.signals, r.in.Signals...)
	r.in.Signals = nil
	return err
}

// call runs a syscall whose output lands in the scratch buffer and returns
// the first n bytes of it.
func (r *remote) call(name string, n int, nr uint64, args ...uint64) (uint64, []byte, error) {
	ret, err := r.in.Call(name, nr, args...)
	if err != nil {
		return 0, nil, err
	}
	if n == 0 {
		return ret, nil, nil
	}
	out := make([]byte, n)
	if err := readMem(r.pid, r.scratch, out); err != nil {
		return 0, nil, err
	}
	return ret, out, nil
}

// outArg stands, in the arguments of an asked call, for the address of
// the call's output buffer.
const outArg uint64 = 0x0ddba11000000000

// withOut returns args with outArg replaced by addr.
func withOut(args []uint64, addr uint64) []uint64 {
	out := append([]uint64(nil), args...)
	for k, a := range out {
		if a == outArg {
			out[k] = addr
		}
	}
	return out
}

// An asker makes system calls in one thread of the process: one at a time
// (remote), or all in one go when flushed (batch). ask adds a call whose
// output buffer is n bytes at the address given for outArg; done gets its
// result and output once it is made. With a name a failure (a negative
// errno) is an error naming it; with "" done sees every result. The first
// error stops the asking and is returned by flush.
type asker interface {
	ask(name string, n int, done func(ret uint64, out []byte) error, nr uint64, args ...uint64)
	flush() error
}

// ask makes the call at once, its output in the scratch buffer.
func (r *remote) ask(name string, n int, done func(uint64, []byte) error, nr uint64, args ...uint64) {
	if r.err != nil {
		return
	}
	args = withOut(args, r.scratch)
	var ret uint64
	var out []byte
	var err error
	if name == "" {
		ret, err = r.in.Syscall(nr, args...)
		if err == nil && n > 0 {
			out = make([]byte, n)
			err = readMem(r.pid, r.scratch, out)
		}
	} else {
		ret, out, err = r.call(name, n, nr, args...)
	}
	if err == nil && done != nil {
		err = done(ret, out)
	}
	r.err = err
}

func (r *remote) flush() error { return r.err }

// The batch area: memory mapped in the process while it is injected
// into, which holds the batches' code, results and the calls' outputs:
// the leader's region first, then one slot for each other thread of a
// wave (the threads of a wave run their batches at the same time).
const (
	leaderRegion  = 64 << 10
	slotSize      = 2 << 10
	waveThreads   = 64
	batchAreaSize = leaderRegion + waveThreads*slotSize
)

// A region is where in the batch area one batch keeps its code, results
// and outputs (offsets).
type region struct {
	code, out, data, end uint64
	maxCalls             int
}

// leader is the region of the leader's batches; slot k that of the k-th
// other thread of a wave.
var leaderBatch = region{code: 0, out: 40 << 10, data: 44 << 10, end: leaderRegion, maxCalls: 480}

func slot(k int) region {
	base := uint64(leaderRegion + k*slotSize)
	return region{data: base, out: base + 256, code: base + 512, end: base + 256, maxCalls: 18}
}

// A callBatch asks one thread for everything at once (ptrace.Batch): one
// ptrace stop, where each call made alone costs two.
type callBatch struct {
	pid     sys.PID
	in      *ptrace.Injector
	area    uint64
	reg     region
	calls   ptrace.Batch
	pending []asked
	data    uint64 // next free output offset in the area
	running *ptrace.RunningBatch
	err     error
}

type asked struct {
	name   string
	off, n uint64
	done   func(uint64, []byte) error
}

func newBatch(pid sys.PID, in *ptrace.Injector, area uint64, reg region) *callBatch {
	return &callBatch{pid: pid, in: in, area: area, reg: reg, data: reg.data}
}

func (b *callBatch) ask(name string, n int, done func(uint64, []byte) error, nr uint64, args ...uint64) {
	size := (uint64(n) + 7) &^ 7
	if b.calls.Len() == b.reg.maxCalls || b.data+size > b.reg.end {
		b.flush()
	}
	if b.err != nil {
		return
	}
	if b.data+size > b.reg.end {
		b.err = fmt.Errorf("thread %d: an output of %d bytes: more than a batch holds", b.in.TID, n)
		return
	}
	off := b.data
	b.data += size
	b.calls.Add(nr, withOut(args, b.area+off)...)
	b.pending = append(b.pending, asked{name: name, off: off, n: uint64(n), done: done})
}

// flush makes the calls asked so far.
func (b *callBatch) flush() error {
	b.start()
	return b.finish()
}

// start starts the calls asked so far; finish waits for them.
func (b *callBatch) start() {
	if b.err != nil || b.calls.Len() == 0 {
		return
	}
	b.running, b.err = b.in.StartBatch(b.pid, &b.calls, b.area+b.reg.code, b.area+b.reg.out)
}

func (b *callBatch) finish() error {
	if b.running == nil {
		return b.err
	}
	pending, used := b.pending, b.data
	b.pending, b.data = nil, b.reg.data
	res, err := b.running.Finish()
	b.running = nil
	b.calls.Reset()
	if err != nil {
		b.err = err
		return err
	}
	data := make([]byte, used-b.reg.data)
	if err := readMem(b.pid, b.area+b.reg.data, data); err != nil {
		b.err = err
		return err
	}
	for k, a := range pending {
		if e := ptrace.Errno(res[k]); e != nil && a.name != "" {
			b.err = fmt.Errorf("%s in %d: %w", a.name, b.in.TID, e)
			return b.err
		}
		if a.done != nil {
			o := a.off - b.reg.data
			if err := a.done(res[k], data[o:o+a.n]); err != nil {
				b.err = err
				return err
			}
		}
	}
	return nil
}

// mapBatchArea maps the batch area in the process, through the leader's
// remote, after everything about its memory has been read; unmapBatchArea
// removes it before the memory is. It returns 0 (calls are made one at a
// time) where a mapping both writable and executable is refused (memory
// deny-write-execute, a security module) or a thread could be killed by
// its seccomp filter for a call the dump makes only in a batch (pause).
// It also returns the mlockall flags in effect (lockFuture): the area is
// the probe, or a probe page is mapped and unmapped when there is none.
// On error, the area it returns (if any) is still to be unmapped.
func (d *dumper) mapBatchArea(r *remote) (area uint64, lockFlags int, err error) {
	// VmLck before the probe: the leader's status, read once frozen (the
	// memory has not changed since).
	before, leader := uint64(0), false
	batches := true
	for _, t := range d.fz.tasks {
		st, err := t.readStatus()
		if err != nil {
			return 0, 0, fmt.Errorf("thread %d: read status: %w", t.tid, err)
		}
		if st.Seccomp != 0 && !t.suspended {
			batches = false
		}
		if t.tid == r.pid.Leader() {
			before, leader = st.VmLck, true
		}
	}
	if !leader {
		var err error
		if before, err = vmLck(r.pid); err != nil {
			return 0, 0, err
		}
	}
	if batches {
		ret, err := r.in.Syscall(unix.SYS_MMAP, 0, batchAreaSize, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE, ^uint64(0), 0)
		if err != nil {
			return 0, 0, err
		}
		if ptrace.Errno(ret) == nil {
			area = ret
		}
	}
	if area == 0 {
		lockFlags, err = lockFuture(r, before)
		return 0, lockFlags, err
	}
	lockFlags, err = lockedFlags(r.pid, before, area)
	return area, lockFlags, err
}

func unmapBatchArea(r *remote, area uint64) error {
	if area == 0 {
		return nil
	}
	_, _, err := r.call("munmap batch area", 0, unix.SYS_MUNMAP, area, batchAreaSize)
	return err
}

// syscallGadget finds a `syscall` instruction to run injected calls at:
// in the vDSO, or, in a process without one (it may unmap it), in any
// other executable mapping. Nothing is written into the process.
func syscallGadget(pid sys.PID, vmas []image.VMA) (uint64, error) {
	areas := execAreas(vmas)
	g, ok, err := ptrace.FindSyscall(pid, areas)
	if err != nil {
		return 0, fmt.Errorf("find a syscall instruction: %w", err)
	}
	if !ok {
		return 0, fmt.Errorf("no vdso and no syscall instruction in any executable mapping: nothing to run injected calls at: %w", ErrUnsupported)
	}
	return g, nil
}

// execAreas lists the executable mappings, the vDSO first.
func execAreas(vmas []image.VMA) []ptrace.Area {
	var out []ptrace.Area
	for _, v := range vmas {
		if v.Kind == image.VMAVDSO {
			out = append([]ptrace.Area{{Start: v.Start, End: v.End}}, out...)
		} else if v.Prot&unix.PROT_EXEC != 0 && v.Kind != image.VMAVsyscall {
			out = append(out, ptrace.Area{Start: v.Start, End: v.End})
		}
	}
	return out
}

// inject asks the process what only it can tell. This is the only time the
// target's registers are changed; each call puts them back. The leader
// maps a batch area, where every thread then makes its calls in one
// batch; without one, each call is injected alone.
func (d *dumper) inject(p *image.Process) (err error) {
	gadget, err := syscallGadget(d.rd(), p.VMAs)
	if err != nil {
		return err
	}
	lead := d.fz.tasks[0]
	r, err := d.newRemote(lead.tid, gadget)
	if err != nil {
		return err
	}
	ierr := r.block()
	var area uint64
	if ierr == nil {
		area, p.LockFuture, ierr = d.mapBatchArea(r)
	}
	if ierr == nil {
		var a asker = r
		if area != 0 {
			a = newBatch(d.rd(), &r.in, area, leaderBatch)
		}
		ierr = d.injectThread(a, p, &p.Threads[0], true)
	}
	if ierr == nil {
		ierr = d.injectOthers(p, gadget, area)
	}
	if err := unmapBatchArea(r, area); err != nil && ierr == nil {
		ierr = fmt.Errorf("thread %d: %w", lead.tid, err)
	}
	if err := r.done(lead); err != nil && ierr == nil {
		ierr = fmt.Errorf("thread %d: restore stack: %w", lead.tid, err)
	}
	return ierr
}

// injectOthers asks the threads other than the leader: in waves of
// batches that run at the same time if there is a batch area, else one
// call at a time.
func (d *dumper) injectOthers(p *image.Process, gadget, area uint64) error {
	tasks, threads := d.fz.tasks[1:], p.Threads[1:]
	if area == 0 {
		for i, t := range tasks {
			r, err := d.newRemote(t.tid, gadget)
			if err != nil {
				return err
			}
			ierr := r.block()
			if ierr == nil {
				ierr = d.injectThread(r, nil, &threads[i], false)
			}
			if err := r.done(t); err != nil && ierr == nil {
				ierr = fmt.Errorf("thread %d: restore stack: %w", t.tid, err)
			}
			if ierr != nil {
				return ierr
			}
		}
		return nil
	}
	for w := 0; w < len(tasks); w += waveThreads {
		wave := tasks[w:min(w+waveThreads, len(tasks))]
		batches := make([]*callBatch, len(wave))
		var ierr error
		for k, t := range wave {
			if ierr = ptrace.SetSigMask(t.tid, ^uint64(0)); ierr != nil {
				break
			}
			b := newBatch(d.rd(), &ptrace.Injector{TID: t.tid}, area, slot(k))
			batches[k] = b
			d.askThread(b, &threads[w+k])
			b.start()
		}
		// Every batch started is finished, even after an error: each
		// task ends in its interrupt stop with its own mask.
		for k, b := range batches {
			if b == nil {
				continue
			}
			if err := b.finish(); err != nil && ierr == nil {
				ierr = err
			}
			if ierr == nil {
				ierr = memPolicyNodes(b, &threads[w+k])
			}
			t := wave[k]
			if err := ptrace.SetSigMask(t.tid, t.mask); err != nil && ierr == nil {
				ierr = err
			}
			t.signals = append(t.signals, b.in.Signals...)
		}
		if ierr != nil {
			return ierr
		}
	}
	return nil
}

// askThread asks a thread what it has of its own.
func (d *dumper) askThread(a asker, th *image.Thread) {
	a.ask("sigaltstack", 24, func(_ uint64, b []byte) error {
		th.AltStack = image.AltStack{SP: le64(b), Flags: int32(binary.LittleEndian.Uint32(b[8:])), Size: le64(b[16:])}
		return nil
	}, unix.SYS_SIGALTSTACK, 0, outArg)
	a.ask("prctl(PR_GET_TID_ADDRESS)", 8, func(_ uint64, b []byte) error {
		th.ClearTID = le64(b)
		return nil
	}, unix.SYS_PRCTL, prGetTIDAddress, outArg)
	memPolicy(a, th)
	injectThreadAttrs(a, d.pid, th)
}

// injectThread asks a thread what it has of its own, and the leader also
// what the process has.
func (d *dumper) injectThread(a asker, p *image.Process, th *image.Thread, leader bool) error {
	d.askThread(a, th)
	if !leader {
		if err := a.flush(); err != nil {
			return err
		}
		return memPolicyNodes(a, th)
	}
	injectProcAttrs(a, p)
	askVMAPolicies(a, p)
	if err := d.askSignals(a, p); err != nil {
		return err
	}
	a.ask("prctl(PR_GET_PDEATHSIG)", 4, func(_ uint64, b []byte) error {
		p.Misc.PdeathSig = int(binary.LittleEndian.Uint32(b))
		return nil
	}, unix.SYS_PRCTL, unix.PR_GET_PDEATHSIG, outArg)
	a.ask("prctl(PR_GET_DUMPABLE)", 0, func(ret uint64, _ []byte) error {
		p.Misc.Dumpable = int(ret)
		return nil
	}, unix.SYS_PRCTL, unix.PR_GET_DUMPABLE)
	d.stopReports(a)
	if err := a.flush(); err != nil {
		return err
	}
	return memPolicyNodes(a, th)
}

// Options of waitid(2) not in x/sys/unix.
const (
	waitNoWait = 0x01000000 // WNOWAIT
	waitAll    = 0x40000000 // __WALL
)

// stopReports asks the process, for each of its stopped children in the
// tree, whether it has collected that child's stop with wait already
// (waitid with WNOWAIT, which collects nothing): the restore reports again
// exactly the stops that were still to be reported.
func (d *dumper) stopReports(a asker) {
	for _, m := range d.t.members {
		if m.fz == nil || len(m.fz.tasks) == 0 || !m.fz.tasks[0].stopped {
			continue
		}
		st, err := proc.ReadStat(m.pid, 0)
		if err != nil || st.PPID != d.pid {
			continue
		}
		child := m.pid
		a.ask(fmt.Sprintf("waitid for the stopped child %d", child), 128, func(_ uint64, b []byte) error {
			if sys.PID(binary.LittleEndian.Uint32(b[16:])) == child {
				if d.t.stopUnreported == nil {
					d.t.stopUnreported = map[sys.PID]bool{}
				}
				d.t.stopUnreported[child] = true
			}
			return nil
		}, unix.SYS_WAITID, unix.P_PID, uint64(child), outArg, unix.WSTOPPED|unix.WNOHANG|waitNoWait|waitAll, 0)
	}
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

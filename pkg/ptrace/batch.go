package ptrace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// A Batch is a list of system calls one tracee makes in one go: the
// tracer writes a small piece of code that loads each call's number and
// arguments, runs it and stores its result, then marks the batch done and
// waits in pause(2). The task runs it from an interrupt stop with
// PTRACE_CONT; the tracer sees the mark and interrupts it again. A call
// costs no ptrace stop of its own (an injected Syscall costs two), and no
// signal is raised: the end is an ordinary interrupt stop, as after Park.
//
// The calls run in order, each whatever the previous ones returned;
// RunBatch returns every result for the caller to check.
type Batch struct {
	calls []batchCall
}

type batchCall struct {
	nr   uint64
	args [6]uint64
}

// Add appends a call and returns its index in the results.
func (b *Batch) Add(nr uint64, args ...uint64) int {
	c := batchCall{nr: nr}
	copy(c.args[:], args)
	b.calls = append(b.calls, c)
	return len(b.calls) - 1
}

// Len is the number of calls.
func (b *Batch) Len() int { return len(b.calls) }

// Reset empties the batch.
func (b *Batch) Reset() { b.calls = b.calls[:0] }

const (
	callCodeSize = 7*10 + 2 + 10 // seven movabs, syscall, store of rax
	tailCodeSize = 10 + 10 + 10 + 2 + 2
	sysPause     = 34
)

// BatchCodeSize is the size of the code of a batch of n calls.
func BatchCodeSize(n int) int { return n*callCodeSize + tailCodeSize }

// BatchOutSize is the size of the memory a batch of n calls writes its
// results (and its done mark) to.
func BatchOutSize(n int) int { return 8 * (n + 1) }

// movabs $imm, reg: the REX prefix and opcode of each register the calls
// use.
var (
	movRAX = []byte{0x48, 0xb8}
	movArg = [6][]byte{
		{0x48, 0xbf}, // rdi
		{0x48, 0xbe}, // rsi
		{0x48, 0xba}, // rdx
		{0x49, 0xba}, // r10
		{0x49, 0xb8}, // r8
		{0x49, 0xb9}, // r9
	}
)

// code assembles the batch: results go to out+8*i, the done mark to
// out+8*n.
func (b *Batch) code(out, mark uint64) []byte {
	le := binary.LittleEndian
	c := make([]byte, 0, BatchCodeSize(len(b.calls)))
	mov := func(op []byte, v uint64) {
		c = append(c, op...)
		c = le.AppendUint64(c, v)
	}
	store := func(addr uint64) { // movabs %rax, addr
		c = append(c, 0x48, 0xa3)
		c = le.AppendUint64(c, addr)
	}
	for i, call := range b.calls {
		mov(movRAX, call.nr)
		for k, a := range call.args {
			mov(movArg[k], a)
		}
		c = append(c, 0x0f, 0x05)
		store(out + 8*uint64(i))
	}
	mov(movRAX, mark)
	store(out + 8*uint64(len(b.calls)))
	// 1: pause(); jmp 1b
	mov(movRAX, sysPause)
	c = append(c, 0x0f, 0x05, 0xeb, 0xf2)
	return c
}

// batchTimeout bounds a batch: its calls do not block, so one that does
// not finish is stuck in the kernel.
const batchTimeout = 10 * time.Second

// ErrBatchTimeout means a batch did not finish in time.
var ErrBatchTimeout = errors.New("batch did not finish")

// RunBatch runs the calls of b in the tracee, which must be in an
// interrupt stop (or at the syscall-exit stop of an injected call). code
// is memory the tracee can execute and the tracer can write (through
// /proc/PID/mem if it is not writable), BatchCodeSize bytes; out is
// memory the tracee can write, BatchOutSize bytes. pid is the process of
// the tracee. The task ends in an interrupt stop with its registers as
// they were. Signals that stop the task meanwhile are taken off the queue
// and added to in.Signals, as Syscall does.
func (in *Injector) RunBatch(pid sys.PID, b *Batch, code, out uint64) ([]uint64, error) {
	rb, err := in.StartBatch(pid, b, code, out)
	if err != nil {
		return nil, err
	}
	return rb.Finish()
}

// A RunningBatch is a batch started (StartBatch) and not yet finished:
// batches of several threads run at the same time, each with its own
// code and out memory.
type RunningBatch struct {
	in    *Injector
	pid   sys.PID
	n     int
	out   uint64
	mark  uint64
	saved unix.PtraceRegs
}

// StartBatch starts a batch as RunBatch does, and returns without
// waiting for it. Finish must be called next for this tracee.
func (in *Injector) StartBatch(pid sys.PID, b *Batch, code, out uint64) (*RunningBatch, error) {
	if len(b.calls) == 0 {
		return nil, nil
	}
	saved, err := GetRegs(in.TID)
	if err != nil {
		return nil, err
	}
	rb := &RunningBatch{in: in, pid: pid, n: len(b.calls), out: out, mark: uint64(time.Now().UnixNano()) | 1, saved: saved}
	if err := WriteMem(pid, out+8*uint64(rb.n), make([]byte, 8)); err != nil {
		return nil, fmt.Errorf("batch in %d: clear mark: %w", in.TID, err)
	}
	if err := WriteMem(pid, code, b.code(out, rb.mark)); err != nil {
		return nil, fmt.Errorf("batch in %d: write code: %w", in.TID, err)
	}
	r := saved
	r.Rip = code
	r.Orig_rax = ^uint64(0) // no syscall restart on the way out
	if err := SetRegs(in.TID, &r); err != nil {
		return nil, err
	}
	if err := Cont(in.TID, 0); err != nil {
		SetRegs(in.TID, &saved)
		return nil, err
	}
	return rb, nil
}

// Finish waits for a started batch to end and returns its results (nil
// for an empty batch).
func (rb *RunningBatch) Finish() ([]uint64, error) {
	if rb == nil {
		return nil, nil
	}
	in := rb.in
	res, err := in.runUntilMark(rb.pid, rb.out, rb.n, rb.mark, &rb.saved)
	if err != nil {
		return nil, err
	}
	if err := SetRegs(in.TID, &rb.saved); err != nil {
		return nil, err
	}
	return res, nil
}

// runUntilMark waits until the mark at out+8n is set, then puts the
// running task back in an interrupt stop and returns the results.
func (in *Injector) runUntilMark(pid sys.PID, out uint64, n int, mark uint64, saved *unix.PtraceRegs) ([]uint64, error) {
	// Only the mark is polled: the results are read once the task is
	// stopped again. Read together with the mark while the task runs,
	// a result could be copied before the task stored it and the mark
	// after (a mapping that "landed at 0x0" was seen once).
	buf := make([]byte, 8*n)
	markBuf := make([]byte, 8)
	deadline := time.Now().Add(batchTimeout)
	sleep := time.Duration(0)
	for i := 0; ; i++ {
		stopped, err := in.pollStop(saved)
		if err != nil {
			return nil, err
		}
		if stopped {
			if err := Cont(in.TID, 0); err != nil {
				return nil, err
			}
			i, sleep = 0, 0 // the batch goes on: poll closely again
			continue
		}
		if err := ReadMem(pid, out+8*uint64(n), markBuf); err != nil {
			return nil, fmt.Errorf("batch in %d: read mark: %w", in.TID, err)
		}
		if binary.LittleEndian.Uint64(markBuf) == mark {
			break
		}
		if time.Now().After(deadline) {
			Interrupt(in.TID)
			in.waitInterrupt("batch")
			SetRegs(in.TID, saved)
			return nil, fmt.Errorf("batch of %d calls in %d: %w within %v", n, in.TID, ErrBatchTimeout, batchTimeout)
		}
		sleep = Backoff(i, sleep)
	}
	if err := Interrupt(in.TID); err != nil {
		return nil, err
	}
	if err := in.waitInterrupt("batch"); err != nil {
		return nil, err
	}
	if err := ReadMem(pid, out, buf); err != nil {
		return nil, fmt.Errorf("batch in %d: read results: %w", in.TID, err)
	}
	res := make([]uint64, n)
	for i := range res {
		res[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return res, nil
}

// Backoff is what a tracer polling a tracee does between its polls
// number i: nothing for the first ones (a tracee usually answers within
// microseconds), then it yields the CPU (to a tracee waiting for it),
// then sleeps from 5µs doubling up to 100µs, so that it oversleeps by at
// most about the time it already waited. It returns the next sleep.
// nanosleep blocks the tracer's (locked) OS thread for exactly that: a
// time.Sleep under a millisecond waits a millisecond (the runtime's
// timers are that coarse).
func Backoff(i int, sleep time.Duration) time.Duration {
	switch {
	case i < 10:
	case i < 40:
		sys.SchedYield()
	default:
		sleep = min(max(2*sleep, 5*time.Microsecond), 100*time.Microsecond)
		ts := unix.NsecToTimespec(int64(sleep))
		unix.Nanosleep(&ts, nil)
	}
	return sleep
}

// pollStop collects a stop of the running batch without waiting: a
// signal (taken off the queue, kept in in.Signals) or an event. It tells
// whether the task stopped (and must be resumed).
func (in *Injector) pollStop(saved *unix.PtraceRegs) (bool, error) {
	var ws unix.WaitStatus
	got, err := unix.Wait4(int(in.TID), &ws, unix.WALL|unix.WNOHANG, nil)
	if err == unix.EINTR || (err == nil && sys.TID(got) != in.TID) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("wait %d: %w", in.TID, err)
	}
	st := Stop{Status: ws}
	if ws.Stopped() {
		st.Event = int(ws>>16) & 0xff
	}
	if st.Exited() {
		return false, fmt.Errorf("batch in %d: %s: %w", in.TID, st, ErrExited)
	}
	if st.Event == 0 {
		info, _ := GetSigInfo(in.TID)
		if fault(st.Sig(), info) {
			r, _ := GetRegs(in.TID)
			SetRegs(in.TID, saved)
			return false, fmt.Errorf("batch in %d: %v at %#x", in.TID, st.Sig(), r.Rip)
		}
		in.Signals = append(in.Signals, Signal{Sig: st.Sig(), Info: info})
	}
	return true, nil
}

// waitInterrupt waits for the interrupt stop asked for, keeping signals
// that stop the task first (a trap clears a pending interrupt: it is
// asked again). what names the operation in errors.
func (in *Injector) waitInterrupt(what string) error {
	for {
		st, err := Wait(in.TID)
		if err != nil {
			return err
		}
		if st.Exited() {
			return fmt.Errorf("%s in %d: %s: %w", what, in.TID, st, ErrExited)
		}
		if st.IsEventStop() {
			return nil
		}
		if st.Event == 0 {
			info, _ := GetSigInfo(in.TID)
			in.Signals = append(in.Signals, Signal{Sig: st.Sig(), Info: info})
		}
		if err := Cont(in.TID, 0); err != nil {
			return err
		}
		if err := Interrupt(in.TID); err != nil {
			return err
		}
	}
}

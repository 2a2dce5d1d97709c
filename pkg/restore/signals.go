package restore

// Signal state of a process being built: handlers, interval and POSIX
// timers, pending signals with their siginfo. The dump side is
// pkg/dump/inject.go and collect.go.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

func (b *builder) signals() error {
	p := b.p
	// Block everything while signals are queued, so none is delivered
	// during the remaining injections; the real mask is set last.
	for _, t := range b.tasks {
		if err := ptrace.SetSigMask(t, ^uint64(0)); err != nil {
			return err
		}
	}
	for i, a := range p.Signals.Actions {
		sig := i + 1
		if a == (image.Sigaction{}) || sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		if err := b.write(scratchOff, ptrace.Bytes(&a)); err != nil {
			return err
		}
		if _, err := b.call(fmt.Sprintf("rt_sigaction %d", sig), unix.SYS_RT_SIGACTION, uint64(sig), b.gadget+scratchOff, 0, 8); err != nil {
			return err
		}
	}
	for which, it := range []image.ITimer{p.Timers.Real, p.Timers.Virtual, p.Timers.Prof} {
		if it.ValueUs == 0 && it.IntervalUs == 0 {
			continue
		}
		if it.ValueUs == 0 {
			// An interval timer that expired with its signal still
			// queued: the kernel re-arms it when that signal is taken,
			// which setitimer cannot express (a zero value disarms).
			// Armed for one interval, it next fires where the re-armed
			// timer would; the queued signal is restored with the rest.
			it.ValueUs = it.IntervalUs
		}
		v := [4]int64{it.IntervalUs / 1e6, it.IntervalUs % 1e6, it.ValueUs / 1e6, it.ValueUs % 1e6}
		if err := b.write(scratchOff, ptrace.Bytes(&v)); err != nil {
			return err
		}
		if _, err := b.call("setitimer", unix.SYS_SETITIMER, uint64(which), b.gadget+scratchOff, 0); err != nil {
			return err
		}
	}
	rearmed, err := b.posixTimers()
	if err != nil {
		return err
	}
	for _, si := range p.Signals.Pending {
		if timerSignal(si, rearmed) || b.deferStop(si, -1) {
			continue
		}
		if err := b.queue(si, -1); err != nil {
			return err
		}
	}
	for i, th := range p.Threads {
		for _, si := range th.Pending {
			if timerSignal(si, rearmed) || b.deferStop(si, i) {
				continue
			}
			if err := b.queue(si, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// deferStop keeps for stopAgain a stop signal (SIGSTOP, SIGTSTP, SIGTTIN,
// SIGTTOU) pending in a stopped process: one that came while it was
// stopped already, which waits there until a SIGCONT discards it. Queued
// now it would stop the process in the middle of its restore. i is the
// thread's index, -1 for the process's shared queue.
func (b *builder) deferStop(si image.SigInfo, i int) bool {
	if !b.p.Misc.Stopped || len(si) < 4 {
		return false
	}
	switch sig := unix.Signal(binary.LittleEndian.Uint32(si)); sig {
	case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		b.pendingStops = append(b.pendingStops, pendingStop{sig: sig, thread: i})
		return true
	}
	return false
}

// A pendingStop is a stop signal pending in a stopped process (deferStop),
// of thread index thread or (-1) of the whole process.
type pendingStop struct {
	sig    unix.Signal
	thread int
}

// queueStops queues again, once the process is stopped again, the stop
// signals that were pending in it: sent by ckpt-redo (their siginfo, which
// no one can read, names it), they stay pending until a SIGCONT.
func (b *builder) queueStops() error {
	for _, ps := range b.pendingStops {
		var err error
		if ps.thread < 0 {
			err = unix.Kill(int(b.p.PID), ps.sig)
		} else {
			err = unix.Tgkill(int(b.p.PID), int(b.p.Threads[ps.thread].TID), ps.sig)
		}
		if err != nil {
			return fmt.Errorf("pending %v: %w", ps.sig, err)
		}
	}
	return nil
}

// posixTimers re-creates timer_create timers with their IDs: the kernel
// hands out IDs in order from 0, so holes are filled with timers that are
// deleted afterwards. It returns the IDs of the periodic timers whose
// signal was pending (value 0: the kernel re-arms them only when their
// signal is dequeued): they are armed to expire at once, which queues
// their signal again, tied to the timer as the kernel's own is, so that
// its dequeue re-arms the timer; the saved copy of that signal is not
// queued (timerSignal).
func (b *builder) posixTimers() (map[int32]bool, error) {
	ts := b.p.Timers.Posix
	rearmed := map[int32]bool{}
	if len(ts) == 0 {
		return rearmed, nil
	}
	gone, err := b.goneThreads(ts)
	defer func() {
		if gone != nil {
			b.endGoneThreads(gone) // after an error: the restore fails anyway
		}
	}()
	if err != nil {
		return nil, err
	}
	type arm struct {
		id   int
		spec [4]int64
	}
	var arms []arm
	want := map[int]image.PosixTimer{}
	maxID := 0
	for _, t := range ts {
		want[t.ID] = t
		maxID = max(maxID, t.ID)
	}
	if maxID > 4096 {
		return nil, fmt.Errorf("posix timer id %d: too large to recreate", maxID)
	}
	var filler []int
	for id := 0; id <= maxID; id++ {
		t, ok := want[id]
		// struct sigevent: sigval (8), signo (4), notify (4), tid (4) ...
		var ev [64]byte
		clock := 1 // CLOCK_MONOTONIC for fillers
		if ok {
			binary.LittleEndian.PutUint64(ev[0:], t.SigValue)
			binary.LittleEndian.PutUint32(ev[8:], uint32(t.Signal))
			binary.LittleEndian.PutUint32(ev[12:], uint32(t.Notify))
			if t.Notify&sigevThreadID != 0 {
				binary.LittleEndian.PutUint32(ev[16:], uint32(t.NotifyTID))
			}
			clock = t.Clock
		} else {
			binary.LittleEndian.PutUint32(ev[12:], 1) // SIGEV_NONE
		}
		if err := b.write(scratchOff, ev[:]); err != nil {
			return nil, err
		}
		if _, err := b.call("timer_create", unix.SYS_TIMER_CREATE, uint64(clock), b.gadget+scratchOff, b.gadget+scratchOff+64); err != nil {
			return nil, err
		}
		var got [4]byte
		if err := ptrace.ReadMem(b.target, b.gadget+scratchOff+64, got[:]); err != nil {
			return nil, err
		}
		if gid := int(binary.LittleEndian.Uint32(got[:])); gid != id {
			return nil, fmt.Errorf("timer_create gave id %d, want %d", gid, id)
		}
		if !ok {
			filler = append(filler, id)
			continue
		}
		if t.ValueNs == 0 && t.IntervalNs == 0 {
			continue
		}
		if t.ValueNs == 0 {
			t.ValueNs = 1
			rearmed[int32(id)] = true
		}
		arms = append(arms, arm{id, [4]int64{t.IntervalNs / 1e9, t.IntervalNs % 1e9, t.ValueNs / 1e9, t.ValueNs % 1e9}})
	}
	// The threads gone are gone again before any timer can fire: a
	// signal queued to one of them would be lost with it, where the
	// kernel queued none.
	err, gone = b.endGoneThreads(gone), nil
	if err != nil {
		return nil, err
	}
	for _, a := range arms {
		if err := b.write(scratchOff, ptrace.Bytes(&a.spec)); err != nil {
			return nil, err
		}
		if _, err := b.call("timer_settime", unix.SYS_TIMER_SETTIME, uint64(a.id), 0, b.gadget+scratchOff, 0); err != nil {
			return nil, err
		}
	}
	for _, id := range filler {
		if _, err := b.call("timer_delete", unix.SYS_TIMER_DELETE, uint64(id)); err != nil {
			return nil, err
		}
	}
	return rearmed, nil
}

// goneThreads clones, for the timers of ts whose thread has exited
// (NotifyExited), a thread with that TID for timer_create to name (it
// accepts only a live thread of the process); endGoneThreads makes them
// exit once the timers exist, which leaves the timers as the dump found
// them: tied to a thread that is gone, their signals going nowhere. It
// returns the TIDs cloned, also on error.
func (b *builder) goneThreads(ts []image.PosixTimer) ([]sys.TID, error) {
	var gone []sys.TID
	inImage, made := map[sys.TID]bool{}, map[sys.TID]bool{}
	for _, th := range b.p.Threads {
		inImage[th.TID] = true
	}
	for _, t := range ts {
		if !t.NotifyExited {
			continue
		}
		if t.Notify&sigevThreadID == 0 || inImage[t.NotifyTID] {
			return gone, fmt.Errorf("posix timer %d: notifies thread %d, which exited, but is no SIGEV_THREAD_ID timer or the thread is in the image: %w",
				t.ID, t.NotifyTID, image.ErrCorrupt)
		}
		if made[t.NotifyTID] {
			continue
		}
		made[t.NotifyTID] = true
		if err := b.cloneThread(t.NotifyTID); err != nil {
			return gone, fmt.Errorf("posix timer %d: the thread it notifies, which had exited: %w", t.ID, err)
		}
		gone = append(gone, t.NotifyTID)
		if err := waitNewTask(t.NotifyTID); err != nil {
			return gone, err
		}
	}
	return gone, nil
}

// endGoneThreads makes the threads goneThreads cloned exit (injected
// exit), and reaps them.
func (b *builder) endGoneThreads(gone []sys.TID) error {
	for _, tid := range gone {
		in := ptrace.Injector{TID: tid, Gadget: b.gadget}
		_, err := in.Syscall(unix.SYS_EXIT, 0)
		if err == nil {
			return fmt.Errorf("thread %d made for the posix timers that notify it: exit returned", tid)
		}
		if !errors.Is(err, ptrace.ErrExited) {
			return fmt.Errorf("thread %d made for the posix timers that notify it: exit: %w", tid, err)
		}
	}
	return nil
}

// timerSignal reports whether si is the signal of a POSIX timer in
// rearmed (si_code SI_TIMER, si_timerid at offset 16).
func timerSignal(si image.SigInfo, rearmed map[int32]bool) bool {
	if len(si) < 20 || len(rearmed) == 0 {
		return false
	}
	code := int32(binary.LittleEndian.Uint32(si[8:]))
	return code == siTimer && rearmed[int32(binary.LittleEndian.Uint32(si[16:]))]
}

// queue puts a pending signal back, with its siginfo: to the process, or
// to thread i of Process.Threads (i >= 0). The signal is sent by the
// thread to itself: only then does the kernel accept any si_code.
func (b *builder) queue(si image.SigInfo, i int) error {
	if len(si) != ptrace.SigInfoSize {
		return fmt.Errorf("siginfo of %d bytes: %w", len(si), image.ErrCorrupt)
	}
	sig := uint64(binary.LittleEndian.Uint32(si))
	if err := b.write(scratchOff, si); err != nil {
		return err
	}
	if i < 0 {
		_, err := b.call(fmt.Sprintf("rt_sigqueueinfo %d", sig), unix.SYS_RT_SIGQUEUEINFO, uint64(b.target), sig, b.gadget+scratchOff)
		return err
	}
	tid := b.p.Threads[i].TID
	_, err := b.ins[i].Call(fmt.Sprintf("rt_tgsigqueueinfo %d", sig), unix.SYS_RT_TGSIGQUEUEINFO, uint64(b.target), uint64(tid), sig, b.gadget+scratchOff)
	return err
}

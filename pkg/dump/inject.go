package dump

import (
	"encoding/binary"
	"fmt"

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
	pid     int
	scratch uint64
	saved   []byte
}

func (d *dumper) newRemote(tid int, gadget uint64) (*remote, error) {
	regs, err := ptrace.GetRegs(tid)
	if err != nil {
		return nil, err
	}
	r := &remote{in: ptrace.Injector{TID: tid, Gadget: gadget}, pid: d.pid}
	r.scratch = (regs.Rsp - redZone - scratchSize) &^ 63
	r.saved = make([]byte, scratchSize)
	if err := readMem(d.pid, r.scratch, r.saved); err != nil {
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

// syscallGadget finds a `syscall` instruction to run injected calls at:
// in the vDSO, or, in a process without one (it may unmap it), in any
// other executable mapping. Nothing is written into the process.
func syscallGadget(pid int, vmas []image.VMA) (uint64, error) {
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
// target's registers are changed; each call puts them back.
func (d *dumper) inject(p *image.Process) (err error) {
	gadget, err := syscallGadget(d.pid, p.VMAs)
	if err != nil {
		return err
	}
	for i, t := range d.fz.tasks {
		r, err := d.newRemote(t.tid, gadget)
		if err != nil {
			return err
		}
		ierr := r.block()
		if ierr == nil {
			ierr = d.injectThread(r, p, &p.Threads[i], i == 0)
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

func (d *dumper) injectThread(r *remote, p *image.Process, th *image.Thread, leader bool) error {
	s := r.scratch
	_, b, err := r.call("sigaltstack", 24, unix.SYS_SIGALTSTACK, 0, s)
	if err != nil {
		return err
	}
	th.AltStack = image.AltStack{SP: le64(b), Flags: int32(binary.LittleEndian.Uint32(b[8:])), Size: le64(b[16:])}
	if _, b, err = r.call("prctl(PR_GET_TID_ADDRESS)", 8, unix.SYS_PRCTL, prGetTIDAddress, s); err != nil {
		return err
	}
	th.ClearTID = le64(b)
	if err := memPolicy(r, th); err != nil {
		return err
	}
	if leader {
		if p.LockFuture, err = lockFuture(r); err != nil {
			return err
		}
	}
	if err := injectThreadAttrs(r, th); err != nil {
		return err
	}
	if !leader {
		return nil
	}
	if err := injectProcAttrs(r, p); err != nil {
		return err
	}
	// Only caught and ignored signals can have a handler; the others are
	// SIG_DFL. SIGCHLD is always asked: SA_NOCLDWAIT and SA_NOCLDSTOP
	// matter even with SIG_DFL.
	status, err := proc.ReadStatus(d.pid)
	if err != nil {
		return fmt.Errorf("read status: %w", err)
	}
	handled := status.SigCgt | status.SigIgn | 1<<(unix.SIGCHLD-1)
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) || handled&(1<<(sig-1)) == 0 {
			p.Signals.Actions = append(p.Signals.Actions, image.Sigaction{})
			continue
		}
		_, b, err := r.call("rt_sigaction", 32, unix.SYS_RT_SIGACTION, uint64(sig), 0, s, 8)
		if err != nil {
			return err
		}
		p.Signals.Actions = append(p.Signals.Actions, image.Sigaction{
			Handler: le64(b), Flags: le64(b[8:]), Restorer: le64(b[16:]), Mask: le64(b[24:]),
		})
	}
	for which, it := range []*image.ITimer{&p.Timers.Real, &p.Timers.Virtual, &p.Timers.Prof} {
		_, b, err := r.call("getitimer", 32, unix.SYS_GETITIMER, uint64(which), s)
		if err != nil {
			return err
		}
		it.IntervalUs = int64(le64(b))*1e6 + int64(le64(b[8:]))
		it.ValueUs = int64(le64(b[16:]))*1e6 + int64(le64(b[24:]))
	}
	if _, b, err = r.call("prctl(PR_GET_PDEATHSIG)", 4, unix.SYS_PRCTL, unix.PR_GET_PDEATHSIG, s); err != nil {
		return err
	}
	p.Misc.PdeathSig = int(binary.LittleEndian.Uint32(b))
	ret, _, err := r.call("prctl(PR_GET_DUMPABLE)", 0, unix.SYS_PRCTL, unix.PR_GET_DUMPABLE)
	if err != nil {
		return err
	}
	p.Misc.Dumpable = int(ret)
	timers, err := readPosixTimers(d.pid)
	if err != nil {
		return err
	}
	for i := range timers {
		_, b, err := r.call("timer_gettime", 32, unix.SYS_TIMER_GETTIME, uint64(timers[i].ID), s)
		if err != nil {
			return err
		}
		timers[i].IntervalNs = int64(le64(b))*1e9 + int64(le64(b[8:]))
		timers[i].ValueNs = int64(le64(b[16:]))*1e9 + int64(le64(b[24:]))
		ov, _, err := r.call("timer_getoverrun", 0, unix.SYS_TIMER_GETOVERRUN, uint64(timers[i].ID))
		if err != nil {
			return err
		}
		timers[i].Overrun = int(ov)
	}
	p.Timers.Posix = timers
	return d.stopReports(r)
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
func (d *dumper) stopReports(r *remote) error {
	for _, m := range d.t.members {
		if m.fz == nil || len(m.fz.tasks) == 0 || !m.fz.tasks[0].stopped {
			continue
		}
		st, err := proc.ReadStat(m.pid, 0)
		if err != nil || st.PPID != d.pid {
			continue
		}
		_, b, err := r.call("waitid", 24, unix.SYS_WAITID, unix.P_PID, uint64(m.pid), r.scratch,
			unix.WSTOPPED|unix.WNOHANG|waitNoWait|waitAll, 0)
		if err != nil {
			return fmt.Errorf("waitid for the stopped child %d: %w", m.pid, err)
		}
		if int(binary.LittleEndian.Uint32(b[16:])) == m.pid {
			if d.t.stopUnreported == nil {
				d.t.stopUnreported = map[int]bool{}
			}
			d.t.stopUnreported[m.pid] = true
		}
	}
	return nil
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// readPosixTimers reads the POSIX timers of a process from
// /proc/PID/timers; their times come from injected timer_gettime.
func readPosixTimers(pid int) ([]image.PosixTimer, error) {
	ts, err := proc.ReadTimers(pid)
	if err != nil {
		return nil, fmt.Errorf("read timers: %w", err)
	}
	var out []image.PosixTimer
	for _, t := range ts {
		out = append(out, image.PosixTimer{ID: t.ID, Clock: t.Clock, Signal: t.Signal, Notify: t.Notify, NotifyTID: t.NotifyTID, SigValue: t.SigValue})
	}
	return out, nil
}

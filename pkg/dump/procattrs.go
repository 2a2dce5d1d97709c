package dump

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// Process and thread attributes besides memory, files and signals: what
// pkg/inventory lists in its process, thread and creds families. Most are
// read from outside (/proc, sched_getattr, ioprio_get of the frozen
// thread); the prctl getters that only the process can call are injected.

const (
	membarrierGetRegs       = 1 << 9 // MEMBARRIER_CMD_GET_REGISTRATIONS
	prGetMemoryMerge        = 0x44
	prGetMDWE               = 0x42
	seccompFilterFlagsSaved = unix.SECCOMP_FILTER_FLAG_LOG | unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW
	pfMemallocNoIO          = 0x00080000 // PF_MEMALLOC_NOIO, set by PR_SET_IO_FLUSHER
	pfMCEProcess            = 0x00000080 // PF_MCE_PROCESS: a PR_MCE_KILL policy of its own
	pfMCEEarly              = 0x08000000 // PF_MCE_EARLY: that policy is early kill
)

// collectSched reads the scheduling policy, nice value, CPU affinity, I/O
// priority and timer slack of thread t of process pid from outside.
func collectSched(pid sys.PID, t *task, th *image.Thread) error {
	tid := t.tid
	a, err := unix.SchedGetAttr(int(tid), 0)
	if err != nil {
		return fmt.Errorf("sched_getattr: %w", err)
	}
	// getpriority gives 20 - nice, for every policy (sched_getattr leaves
	// the nice value of real-time threads out).
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, int(tid))
	if err != nil {
		return fmt.Errorf("getpriority: %w", err)
	}
	th.Sched = &image.Sched{Policy: a.Policy, Flags: a.Flags, Nice: int32(20 - prio), Priority: a.Priority,
		Runtime: a.Runtime, Deadline: a.Deadline, Period: a.Period, UtilMin: a.Util_min, UtilMax: a.Util_max}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(int(tid), &set); err != nil {
		return fmt.Errorf("sched_getaffinity: %w", err)
	}
	words := (*[len(set)]uint64)(unsafe.Pointer(&set))[:]
	n := len(words)
	for n > 0 && words[n-1] == 0 {
		n--
	}
	th.Affinity = append([]uint64(nil), words[:n]...)
	if th.IOPrio, err = sys.IoprioGet(tid); err != nil {
		return err
	}
	// The timer slack too is read from outside: no injected call.
	slack, err := t.readFile(pid, "timerslack_ns")
	if err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}
	if th.TimerSlack, err = strconv.ParseUint(strings.TrimSpace(string(slack)), 10, 64); err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}
	return nil
}

// threadFlags reads the machine-check policy of thread t of process
// pid from its task flags (what PR_MCE_KILL_GET answers), and refuses
// syscall user dispatch and the I/O flusher flag, which ckpt does not
// restore.
func threadFlags(pid sys.PID, t *task, th *image.Thread) error {
	tid := t.tid
	if mode, err := ptrace.GetSyscallUserDispatchMode(tid); err == nil && mode != 0 {
		return refuse(pid, fmt.Sprintf("thread %d", tid), "syscall user dispatch (PR_SET_SYSCALL_USER_DISPATCH) is not restored")
	}
	st, err := t.readStat(pid)
	if err != nil {
		return fmt.Errorf("read stat: %w", err)
	}
	if st.Flags&pfMemallocNoIO != 0 {
		return refuse(pid, fmt.Sprintf("thread %d", tid), "I/O flusher (PR_SET_IO_FLUSHER) or no-I/O allocation flag is not restored")
	}
	th.MCEKill = unix.PR_MCE_KILL_DEFAULT
	if st.Flags&pfMCEProcess != 0 {
		th.MCEKill = unix.PR_MCE_KILL_LATE
		if st.Flags&pfMCEEarly != 0 {
			th.MCEKill = unix.PR_MCE_KILL_EARLY
		}
	}
	return nil
}

// collectProcAttrs reads the process-wide attributes /proc shows.
func collectProcAttrs(pid sys.PID, p *image.Process) error {
	var err error
	if p.Misc.OOMScoreAdj, err = readOOMAdj(pid); err != nil {
		return err
	}
	b, err := proc.ReadFile(proc.Path(pid, "coredump_filter"))
	if err != nil {
		return fmt.Errorf("read coredump_filter: %w", err)
	}
	cf, err := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
	if err != nil {
		return fmt.Errorf("coredump_filter %q: %w", b, err)
	}
	p.Misc.CoredumpFilter = &cf
	if b, err := proc.ReadFile(proc.Path(pid, "loginuid")); err == nil {
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil {
			return fmt.Errorf("loginuid %q: %w", b, err)
		}
		u := uint32(v)
		p.Misc.LoginUID = &u
	}
	if s, ok, err := auditSession(pid); err != nil {
		return err
	} else if ok {
		p.Misc.AuditSession = &s
	}
	return nil
}

// noAuditSession is the sessionid of a process outside any audit session.
const noAuditSession = 4294967295

// auditSession reads /proc/PID/sessionid; ok is false where the kernel has
// no audit support.
func auditSession(pid sys.PID) (id uint32, ok bool, err error) {
	b, err := proc.ReadFile(proc.Path(pid, "sessionid"))
	if err != nil {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("sessionid %q: %w", b, err)
	}
	return uint32(v), true, nil
}

// injectThreadAttrs asks a thread of process pid what only it can tell:
// its securebits, speculation controls and TSC policy; and refuses a
// core-scheduling cookie.
func injectThreadAttrs(a asker, pid sys.PID, th *image.Thread) {
	// Speculation controls a prctl cannot change here are the same in
	// every process (-1: nothing to restore); only the others are asked.
	th.SpecCtrl = make([]int, 3)
	for w := uint64(0); w < 3; w++ {
		th.SpecCtrl[w] = -1
		own, err := unix.PrctlRetInt(unix.PR_GET_SPECULATION_CTRL, uintptr(w), 0, 0, 0)
		if err != nil || own&unix.PR_SPEC_PRCTL == 0 {
			continue
		}
		v := &th.SpecCtrl[w]
		a.ask("", 0, func(ret uint64, _ []byte) error {
			if ptrace.Errno(ret) != nil {
				ret = ^uint64(0)
			}
			*v = int(int32(ret))
			return nil
		}, unix.SYS_PRCTL, unix.PR_GET_SPECULATION_CTRL, w, 0, 0, 0)
	}
	a.ask("", 4, func(ret uint64, b []byte) error {
		if ptrace.Errno(ret) == nil {
			th.TSC = int(int32(binary.LittleEndian.Uint32(b)))
		}
		return nil
	}, unix.SYS_PRCTL, unix.PR_GET_TSC, outArg)
	a.ask("prctl(PR_GET_SECUREBITS)", 0, func(bits uint64, _ []byte) error {
		if th.Creds != nil {
			th.Creds.Securebits = int(bits)
		}
		return nil
	}, unix.SYS_PRCTL, unix.PR_GET_SECUREBITS)
	refuseCoreCookie(a, pid, th)
}

// refuseCoreCookie refuses a thread with a core-scheduling cookie.
func refuseCoreCookie(a asker, pid sys.PID, th *image.Thread) {
	// Without core scheduling in the kernel (ckpt's own call fails) no
	// thread has a cookie.
	if _, err := sys.SchedCoreCookie(); err != nil {
		return
	}
	a.ask("", 8, func(ret uint64, c []byte) error {
		if ptrace.Errno(ret) != nil {
			return nil
		}
		if cookie := binary.LittleEndian.Uint64(c); cookie != 0 {
			return refuse(pid, fmt.Sprintf("thread %d", th.TID), "core-scheduling cookie %#x (PR_SCHED_CORE) is not restored", cookie)
		}
		return nil
	}, unix.SYS_PRCTL, unix.PR_SCHED_CORE, unix.PR_SCHED_CORE_GET, 0, 0, outArg)
}

// injectProcAttrs asks the process (through its leader) for its
// process-wide prctl state and membarrier registrations, and refuses what
// cannot be restored.
func injectProcAttrs(a asker, p *image.Process) {
	a.ask("prctl(PR_GET_CHILD_SUBREAPER)", 4, func(_ uint64, b []byte) error {
		p.Misc.ChildSubreaper = binary.LittleEndian.Uint32(b) != 0
		return nil
	}, unix.SYS_PRCTL, unix.PR_GET_CHILD_SUBREAPER, outArg)
	a.ask("prctl(PR_GET_THP_DISABLE)", 0, func(thp uint64, _ []byte) error {
		p.Misc.THPDisable = int(thp)
		return nil
	}, unix.SYS_PRCTL, unix.PR_GET_THP_DISABLE)
	a.ask("", 0, func(mdwe uint64, _ []byte) error {
		if ptrace.Errno(mdwe) == nil {
			p.Misc.MDWE = int(mdwe)
		}
		return nil
	}, unix.SYS_PRCTL, prGetMDWE, 0, 0, 0, 0)
	// KSM merge-all needs CAP_SYS_RESOURCE to set again.
	a.ask("", 0, func(merge uint64, _ []byte) error {
		if ptrace.Errno(merge) == nil && merge != 0 {
			return refuse(p.PID, "KSM merge-all (PR_SET_MEMORY_MERGE)", "cannot be set again without CAP_SYS_RESOURCE")
		}
		return nil
	}, unix.SYS_PRCTL, prGetMemoryMerge, 0, 0, 0, 0)
	a.ask("", 0, func(regs uint64, _ []byte) error {
		if e := ptrace.Errno(regs); e != nil {
			return fmt.Errorf("membarrier(MEMBARRIER_CMD_GET_REGISTRATIONS): %w", e)
		}
		p.Misc.Membarrier = int(regs)
		return nil
	}, unix.SYS_MEMBARRIER, membarrierGetRegs, 0, 0)
}

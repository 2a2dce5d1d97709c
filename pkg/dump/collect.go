package dump

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
)

type fileData struct {
	id   int
	data []byte
}

// dumper collects the state of one frozen process of a tree.
type dumper struct {
	pid  int
	fz   *frozen
	opts *Options
	t    *tree
}

func (d *dumper) addData(b []byte) int { return d.t.addData(b) }

func (d *dumper) collect() (*image.Process, error) {
	pid := d.pid
	st, err := proc.ReadStat(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("read stat: %w", err)
	}
	status, err := proc.ReadStatus(pid)
	if err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	p := &image.Process{
		PID: pid, PPID: st.PPID, PGID: st.PGRP, SID: st.Session, Comm: st.Comm,
		MM: image.MM{
			StartCode: st.StartCode, EndCode: st.EndCode, StartData: st.StartData, EndData: st.EndData,
			StartBrk: st.StartBrk, StartStack: st.StartStack,
			ArgStart: st.ArgStart, ArgEnd: st.ArgEnd, EnvStart: st.EnvStart, EnvEnd: st.EnvEnd,
		},
	}
	if p.Exe, err = os.Readlink(proc.Path(pid, "exe")); err != nil {
		return nil, fmt.Errorf("read exe link: %w", err)
	}
	if b, err := os.ReadFile(proc.Path(pid, "cmdline")); err == nil {
		p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	}
	if b, err := os.ReadFile(proc.Path(pid, "auxv")); err == nil {
		for i := 0; i+8 <= len(b); i += 8 {
			p.Auxv = append(p.Auxv, binary.LittleEndian.Uint64(b[i:]))
		}
	}
	if err := d.collectMisc(p, status); err != nil {
		return nil, err
	}
	if err := d.collectVMAs(p); err != nil {
		return nil, err
	}
	// brk: the end of the [heap] VMA, or start_brk when there is none.
	p.MM.Brk = p.MM.StartBrk
	for _, v := range p.VMAs {
		if v.Kind == image.VMAHeap {
			p.MM.Brk = v.End
		}
	}
	if err := d.collectFiles(p); err != nil {
		return nil, err
	}
	for _, t := range d.fz.tasks {
		th, err := d.collectThread(t)
		if err != nil {
			return nil, fmt.Errorf("thread %d: %w", t.tid, err)
		}
		p.Threads = append(p.Threads, *th)
	}
	if err := d.strictSeccomp(p); err != nil {
		return nil, err
	}
	// The injection window: what only the process itself can tell.
	if err := d.inject(p); err != nil {
		return nil, err
	}
	threadCreds(p)
	d.opts.fault(PhaseInjected)
	// Queued signals last, after the injection: a SIGSTOP it took off the
	// queue is saved as pending.
	for i, t := range d.fz.tasks {
		pend, err := ptrace.PeekSigInfo(t.tid, false)
		if err != nil {
			return nil, fmt.Errorf("thread %d: %w", t.tid, err)
		}
		for _, s := range t.signals {
			pend = append(pend, s.Info)
		}
		for _, s := range pend {
			p.Threads[i].Pending = append(p.Threads[i].Pending, image.SigInfo(s))
		}
	}
	shared, err := ptrace.PeekSigInfo(pid, true)
	if err != nil {
		return nil, err
	}
	for _, s := range shared {
		p.Signals.Pending = append(p.Signals.Pending, image.SigInfo(s))
	}
	return p, nil
}

func (d *dumper) collectMisc(p *image.Process, status *proc.Status) error {
	pid := d.pid
	var err error
	c, err := readCreds(pid, status)
	if err != nil {
		return err
	}
	p.Creds = *c
	if err := collectProcAttrs(pid, p); err != nil {
		return err
	}
	p.Misc.Umask = status.Umask
	if err := fdkind.DescribeDirs(pid, &p.Misc); err != nil {
		return err
	}
	if b, err := os.ReadFile(proc.Path(pid, "personality")); err == nil {
		p.Misc.Personality, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
	}
	for _, t := range d.fz.tasks {
		if t.stopped {
			p.Misc.Stopped = true
			p.Misc.StopSignal = int(t.stopSig)
			p.Misc.StopUnreported = d.t.stopUnreported[pid]
		}
	}
	lims, err := proc.ReadLimits(pid)
	if err != nil {
		return fmt.Errorf("read limits: %w", err)
	}
	for _, l := range lims {
		p.Rlimits = append(p.Rlimits, image.Rlimit{Resource: l.Resource, Cur: l.Cur, Max: l.Max})
	}
	return nil
}

func (d *dumper) collectThread(t *task) (*image.Thread, error) {
	th := &image.Thread{TID: t.tid, InSyscall: -1}
	regs, err := ptrace.GetRegs(t.tid)
	if err != nil {
		return nil, err
	}
	th.Regs = *(*image.Regs)(unsafe.Pointer(&regs))
	if int64(regs.Orig_rax) >= 0 {
		th.InSyscall = int64(regs.Orig_rax)
	}
	if regs.Orig_rax == sysRestart && int64(regs.Rax) == -restartBlock {
		th.Restart = restartedCall(t.wchan, regs.Rdi, regs.Rsi)
	}
	if th.XState, err = ptrace.GetXState(t.tid); err != nil {
		return nil, err
	}
	th.SigMask = t.mask
	rs, err := ptrace.GetRseq(t.tid)
	if err != nil {
		return nil, err
	}
	th.Rseq = image.Rseq{Ptr: rs.Ptr, Size: rs.Size, Sig: rs.Sig, Flags: rs.Flags}
	if err := d.fixRseq(th); err != nil {
		return nil, err
	}
	head, hlen, err := sys.GetRobustList(sys.TID(t.tid))
	if err != nil {
		return nil, fmt.Errorf("thread %d: %w", t.tid, err)
	}
	th.Robust = image.Robust{Head: head, Len: hlen}
	if b, err := t.readFile(d.pid, "comm"); err == nil {
		th.Comm = strings.TrimSuffix(string(b), "\n")
	}
	if s, err := t.readStat(d.pid); err == nil {
		th.State = string(s.State)
	}
	status, err := t.readStatus()
	if err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	if th.Creds, err = readCreds(t.tid, status); err != nil {
		return nil, err
	}
	if err := collectSched(d.pid, t, th); err != nil {
		return nil, err
	}
	if err := threadFlags(d.pid, t, th); err != nil {
		return nil, err
	}
	return th, nil
}

// fixRseq moves a thread stopped inside an rseq critical section to the
// section's abort handler, as the kernel would on preemption.
func (d *dumper) fixRseq(th *image.Thread) error {
	if th.Rseq.Ptr == 0 {
		return nil
	}
	// struct rseq: u32 cpu_id_start, u32 cpu_id, u64 rseq_cs, ...
	var csPtr [8]byte
	if err := readMem(d.pid, th.Rseq.Ptr+8, csPtr[:]); err != nil {
		return fmt.Errorf("read rseq area: %w", err)
	}
	cs := binary.LittleEndian.Uint64(csPtr[:])
	if cs == 0 {
		return nil
	}
	// struct rseq_cs: u32 version, u32 flags, u64 start_ip, u64 post_commit_offset, u64 abort_ip
	var b [32]byte
	if err := readMem(d.pid, cs, b[:]); err != nil {
		return nil // a stale pointer: the kernel ignores it too until used
	}
	start, off, abort := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
	if th.Regs.Rip >= start && th.Regs.Rip < start+off {
		th.Regs.Rip = abort
	}
	return nil
}

func readMem(pid int, addr uint64, b []byte) error { return ptrace.ReadMem(pid, addr, b) }

func xcr0(xs []byte) uint64 { return ptrace.XCR0(xs) }

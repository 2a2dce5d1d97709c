package dump

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

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
	pid  sys.PID
	fz   *frozen
	opts *Options
	t    *tree
}

func (d *dumper) addData(b []byte) int { return d.t.addData(b) }

func (d *dumper) collect() (*image.Process, error) {
	pid, rd := d.pid, d.rd()
	st, err := proc.ReadStat(rd, 0)
	if err != nil {
		return nil, fmt.Errorf("read stat: %w", err)
	}
	status, err := proc.ReadStatus(pid)
	if err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	if rd != pid {
		// The leader has exited: its own name, and the umask of the
		// process's fs, which the zombie leader let go.
		if st0, err := proc.ReadStat(pid, 0); err == nil {
			st.Comm = st0.Comm
		}
		if live, err := proc.ReadStatus(rd); err == nil {
			status.Umask = live.Umask
		}
	}
	p := &image.Process{
		PID: pid, PPID: st.PPID, PGID: st.PGRP, SID: st.Session, Comm: st.Comm,
		MM: image.MM{
			StartCode: st.StartCode, EndCode: st.EndCode, StartData: st.StartData, EndData: st.EndData,
			StartBrk: st.StartBrk, StartStack: st.StartStack,
			ArgStart: st.ArgStart, ArgEnd: st.ArgEnd, EnvStart: st.EnvStart, EnvEnd: st.EnvEnd,
		},
	}
	if p.Exe, err = os.Readlink(proc.Path(rd, "exe")); err != nil {
		return nil, fmt.Errorf("read exe link: %w", err)
	}
	if b, err := proc.ReadFile(proc.Path(rd, "cmdline")); err == nil {
		p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	}
	if b, err := proc.ReadFile(proc.Path(rd, "auxv")); err == nil {
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
	if m := d.t.member(pid); m != nil && m.vforkChild != 0 {
		return d.collectVforkParent(p, status, m.vforkChild) // no thread to inject into
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
	d.opts.fault(PhaseInjected)
	// Queued signals last, after the injection: a SIGSTOP it took off the
	// queue is saved as pending.
	if err := d.collectPending(p); err != nil {
		return nil, err
	}
	if err := d.exitedLeaderTask(p, &p.Threads[0]); err != nil {
		return nil, err
	}
	if err := d.addExitedLeader(p); err != nil {
		return nil, err
	}
	threadCreds(p)
	return p, nil
}

func (d *dumper) collectMisc(p *image.Process, status *proc.Status) error {
	pid, rd := d.pid, d.rd()
	var err error
	if err := exitedLeaderSeccomp(d.fz, status); err != nil {
		return err
	}
	c, err := readCreds(pid.Leader(), status)
	if err != nil {
		return err
	}
	p.Creds = *c
	if err := collectProcAttrs(rd, p); err != nil {
		return err
	}
	p.Misc.Umask = status.Umask
	if err := fdkind.DescribeDirs(rd, &p.Misc); err != nil {
		return err
	}
	if b, err := proc.ReadFile(proc.Path(rd, "personality")); err == nil {
		p.Misc.Personality, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
	}
	for _, t := range d.fz.tasks {
		if t.stopped {
			p.Misc.Stopped = true
			p.Misc.StopSignal = int(t.stopSig)
			p.Misc.StopUnreported = d.t.stopUnreported[pid]
		}
	}
	lims, err := proc.ReadLimits(rd)
	if err != nil {
		return fmt.Errorf("read limits: %w", err)
	}
	for _, l := range lims {
		p.Rlimits = append(p.Rlimits, image.Rlimit{Resource: l.Resource, Cur: l.Cur, Max: l.Max})
	}
	return nil
}

func readMem(pid sys.PID, addr uint64, b []byte) error { return ptrace.ReadMem(pid, addr, b) }

func xcr0(xs []byte) uint64 { return ptrace.XCR0(xs) }

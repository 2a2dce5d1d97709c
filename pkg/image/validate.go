package image

import (
	"fmt"
	"sort"

	"github.com/ckpt/ckpt/internal/sys"
)

// The checks of one record's content on its own; order.go checks what
// spans records.

// maxPID bounds PIDs and TIDs (PID_MAX_LIMIT).
const maxPID = 1 << 22

// maxFD bounds fd numbers (the kernel's NR_OPEN).
const maxFD = 1 << 20

// checkHeader checks the fields of a header a restore relies on.
func checkHeader(h *Header) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("header: "+format+": %w", append(args, ErrInvalid)...)
	}
	switch {
	case h.Tool == "":
		return bad("no tool")
	case h.Machine == "":
		return bad("no machine")
	case h.Root <= 0 || h.Root > maxPID:
		return bad("root pid %d out of range", h.Root)
	case h.Processes <= 0:
		return bad("%d processes", h.Processes)
	}
	sems := map[int]bool{}
	for _, s := range h.SysVSem {
		if s.ID < 0 || sems[s.ID] || len(s.Values) == 0 || len(s.Values) != len(s.PIDs) {
			return bad("SysV semaphore set %d malformed or repeated", s.ID)
		}
		sems[s.ID] = true
	}
	ids := map[int]bool{}
	for _, q := range h.SysVMsg {
		if q.ID < 0 || ids[q.ID] || q.LSPID < 0 || q.LSPID > maxPID || q.LRPID < 0 || q.LRPID > maxPID {
			return bad("SysV message queue %d malformed or repeated", q.ID)
		}
		ids[q.ID] = true
		for i, m := range q.Messages {
			if m.Type <= 0 {
				return bad("SysV message queue %d: message %d of type %d", q.ID, i, m.Type)
			}
		}
	}
	return nil
}

// checkProcess checks the invariants of one process record that a restore
// relies on, so that a well-checksummed but malformed image is refused
// with the process and the field named, instead of misbehaving.
func checkProcess(p *Process) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("process %d: "+format+": %w", append([]any{p.PID}, append(args, ErrInvalid)...)...)
	}
	if p.PID <= 0 || p.PID > maxPID {
		return bad("pid out of range")
	}
	if p.Zombie {
		if len(p.Threads) != 0 || len(p.VMAs) != 0 || len(p.FDs) != 0 || len(p.Files) != 0 {
			return bad("a zombie with threads, memory or files")
		}
		return nil
	}
	if len(p.Threads) == 0 || p.Threads[0].TID != p.PID.Leader() {
		return bad("no leader thread")
	}
	if p.LeaderExited && (len(p.Threads) < 2 || p.Threads[0].State != "Z" || p.VforkOf != 0) {
		return bad("a process whose leader exited with %d threads (the leader in state %q), or inside vfork()", len(p.Threads), p.Threads[0].State)
	}
	if !p.LeaderExited && p.LeaderExitCode != 0 {
		return bad("a leader exit code %#x for a leader that has not exited", p.LeaderExitCode)
	}
	if p.LeaderExitCode&^0xff00 != 0 {
		return bad("leader exit code %#x: not one the exit system call makes", p.LeaderExitCode)
	}
	if p.VforkOf != 0 && (p.VforkOf != p.PPID || len(p.VMAs) != 0 || len(p.Mapped) != 0 || len(p.Auxv) != 0 || p.MM != (MM{}) || p.FilesOf != 0) {
		return bad("a vfork() child of %d (parent %d) with memory, auxv or a shared fd table of its own", p.VforkOf, p.PPID)
	}
	tids := map[sys.TID]bool{}
	for _, t := range p.Threads {
		if t.TID <= 0 || t.TID > maxPID || tids[t.TID] {
			return bad("thread id %d malformed or repeated", t.TID)
		}
		tids[t.TID] = true
		if t.MemPolicy != nil {
			if err := t.MemPolicy.Check(); err != nil {
				return bad("thread %d: %v", t.TID, err)
			}
		}
	}
	var prevEnd uint64
	for i, v := range p.VMAs {
		if v.Start%PageSize != 0 || v.End%PageSize != 0 || v.End <= v.Start || v.Start < prevEnd {
			return bad("vma %d %#x-%#x malformed", i, v.Start, v.End)
		}
		if h := v.HugePageSize; h != 0 && (v.Kind != VMAAnon || h&(h-1) != 0 || h < PageSize || v.Start%h != 0 || v.End%h != 0) {
			return bad("vma %d %#x-%#x: huge page size %d malformed", i, v.Start, v.End, h)
		}
		if a := v.AIO; (a != nil) != (v.Kind == VMAAIO) || (a != nil && (a.Nr < 2 || a.Head >= a.Nr || a.Tail >= a.Nr ||
			uint64(len(a.Events)) != uint64((a.Tail+a.Nr-a.Head)%a.Nr)*32 || 32+uint64(a.Nr)*32 > v.Len())) {
			return bad("vma %d %#x-%#x: AIO ring malformed", i, v.Start, v.End)
		}
		if v.SysV != nil {
			if h := v.SysV.HugePageSize; h != 0 && (h&(h-1) != 0 || h < PageSize || v.Start%h != 0) {
				return bad("vma %d %#x-%#x: SysV segment huge page size %d malformed", i, v.Start, v.End, h)
			}
		}
		if v.Kind == VMAFile && (v.File < 0 || v.File >= len(p.Mapped)) {
			return bad("vma %d %#x-%#x names mapped file %d of %d", i, v.Start, v.End, v.File, len(p.Mapped))
		}
		if v.Pages < 0 || uint64(v.Pages) > v.Len()/PageSize {
			return bad("vma %d %#x-%#x holds %d pages", i, v.Start, v.End, v.Pages)
		}
		if v.ParentPages < 0 || v.ParentPages > v.Pages {
			return bad("vma %d %#x-%#x holds %d of its %d pages from the parent", i, v.Start, v.End, v.ParentPages, v.Pages)
		}
		if v.MemPolicy != nil {
			if err := v.MemPolicy.Check(); err != nil {
				return bad("vma %d %#x-%#x: %v", i, v.Start, v.End, err)
			}
		}
		prevEnd = v.End
	}
	for _, f := range p.Files {
		if f.ID < 0 || f.Kind == "" {
			return bad("file %d: no kind or negative ID", f.ID)
		}
	}
	fds := map[sys.TargetFD]bool{}
	for _, fd := range p.FDs {
		if fd.FD < 0 || fd.FD > maxFD || fds[fd.FD] {
			return bad("fd %d malformed or repeated", fd.FD)
		}
		fds[fd.FD] = true
	}
	if len(p.Signals.Actions) != 0 && len(p.Signals.Actions) != 64 {
		return bad("%d signal actions", len(p.Signals.Actions))
	}
	return nil
}

// checkRuns checks that the runs of a pages record are well-formed, in
// ascending address order without overlap, and that those with data use
// exactly its dataLen bytes.
func checkRuns(pg *Pages, dataLen int64) error {
	var need, prevEnd uint64
	for i, r := range pg.Runs {
		n := r.Pages * PageSize
		if r.Pages == 0 || n/PageSize != r.Pages || r.Addr%PageSize != 0 || r.Addr+n < r.Addr {
			return fmt.Errorf("pages of process %d: run %#x+%d malformed: %w", pg.PID, r.Addr, r.Pages, ErrInvalid)
		}
		if i > 0 && r.Addr < prevEnd {
			return fmt.Errorf("pages of process %d: run %#x+%d before the end %#x of the previous one: %w", pg.PID, r.Addr, r.Pages, prevEnd, ErrInvalid)
		}
		prevEnd = r.Addr + n
		if r.Zero && r.Parent {
			return fmt.Errorf("pages of process %d: run %#x+%d both zero and the parent's: %w", pg.PID, r.Addr, r.Pages, ErrInvalid)
		}
		if !r.Zero && !r.Parent {
			if need+n < need {
				return fmt.Errorf("pages of process %d: runs overflow: %w", pg.PID, ErrInvalid)
			}
			need += n
		}
	}
	if dataLen < 0 || need != uint64(dataLen) {
		return fmt.Errorf("pages of process %d: runs need %d data bytes, the record has %d: %w", pg.PID, need, dataLen, ErrInvalid)
	}
	return nil
}

// VMAAt returns the VMA of p that holds [addr, addr+n), or nil. p's VMAs
// are in ascending order (checked when the process record is read).
func (p *Process) VMAAt(addr, n uint64) *VMA {
	vs := p.VMAs
	i := sort.Search(len(vs), func(i int) bool { return vs[i].End > addr })
	if i < len(vs) && vs[i].Start <= addr && addr+n <= vs[i].End {
		return &vs[i]
	}
	return nil
}

// Check tells whether the policy is one set_mempolicy or mbind could
// set: a known mode, known flags, not both static and relative nodes,
// a nodemask of at most MemPolicyMaxNode nodes.
func (m *MemPolicy) Check() error {
	mode, flags := m.Mode&^MpolModeFlags, m.Mode&MpolModeFlags
	switch {
	case mode >= MpolMax || m.Mode&^(MpolModeFlags|0xff) != 0:
		return fmt.Errorf("NUMA policy mode %d unknown (%#x): %w", mode, m.Mode, ErrInvalid)
	case flags&MpolFStaticNodes != 0 && flags&MpolFRelativeNodes != 0:
		return fmt.Errorf("NUMA policy with both static and relative nodes: %w", ErrInvalid)
	case len(m.Nodes) > MemPolicyMaxNode/64:
		return fmt.Errorf("NUMA policy nodemask of %d words: %w", len(m.Nodes), ErrInvalid)
	}
	return nil
}

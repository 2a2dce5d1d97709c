package bpftask

import (
	"bytes"
	"fmt"
)

// ErrMismatch means that what the reader read of a stopped task differs
// from what ptrace (or the task itself) told of it: the reader's idea of
// the kernel's structures is wrong, and it must not be used.
var ErrMismatch = fmt.Errorf("BPF task reader does not read what ptrace reads")

// Verify reads the stopped task tid and compares it with want, what
// ptrace and injected calls gave for it: its registers, its xstate (the
// reference image Read takes), its signal stack, TID address, parent
// death signal, rseq registration, securebits, subreaper flag and the
// actions of the signals in actions (a mask, signal 1 in bit 0).
func (r *Reader) Verify(tid int, want *Task, actions uint64) (*Task, error) {
	got, err := r.Read(tid, want.XState)
	if err != nil {
		return nil, err
	}
	return got, r.compare(tid, got, want, actions)
}

func (r *Reader) compare(tid int, got, want *Task, actions uint64) error {
	diff := func(what string, g, w any) error {
		return fmt.Errorf("task %d: %s: read %+v, ptrace says %+v: %w", tid, what, g, w, ErrMismatch)
	}
	switch {
	case got.Regs != want.Regs:
		return diff("registers", got.Regs, want.Regs)
	case !bytes.Equal(got.XState, want.XState):
		for i := range got.XState {
			if got.XState[i] != want.XState[i] {
				return diff(fmt.Sprintf("xstate byte %d", i), got.XState[i], want.XState[i])
			}
		}
	case got.AltStack != want.AltStack:
		return diff("sigaltstack", got.AltStack, want.AltStack)
	case got.ClearTID != want.ClearTID:
		return diff("clear_child_tid", got.ClearTID, want.ClearTID)
	case got.PdeathSig != want.PdeathSig:
		return diff("parent death signal", got.PdeathSig, want.PdeathSig)
	case got.Rseq != want.Rseq:
		return diff("rseq", got.Rseq, want.Rseq)
	case got.Securebits != want.Securebits:
		return diff("securebits", got.Securebits, want.Securebits)
	case got.ChildSubreaper != want.ChildSubreaper:
		return diff("child subreaper", got.ChildSubreaper, want.ChildSubreaper)
	}
	for i := range got.Actions {
		if actions&(1<<i) != 0 && got.Actions[i] != want.Actions[i] {
			return diff(fmt.Sprintf("signal %d action", i+1), got.Actions[i], want.Actions[i])
		}
	}
	return nil
}

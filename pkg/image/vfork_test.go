package image

import (
	"errors"
	"strings"
	"testing"
)

// vforkRecs is the sample image with the root, one thread, waiting in
// vfork() for the child, which holds no memory; edit changes both.
func vforkRecs(edit func(parent, child *Process)) []rawRec {
	r := goodRecs()
	p, c := sampleRoot(), sampleChild()
	p.Threads = []Thread{{TID: 42, Regs: Regs{OrigRax: sysVfork}}}
	c.VMAs, c.VforkOf = nil, 42
	edit(p, c)
	r[1].meta, r[2].meta = p, c
	return r
}

// TestVforkRecords checks the records of a parent waiting in vfork() and
// its child: the child names its parent, holds no memory and no pages,
// the parent is one thread inside vfork().
func TestVforkRecords(t *testing.T) {
	tests := []struct {
		name string
		recs []rawRec
		text string // "" for a good image; else ErrInvalid saying it
	}{
		{"good", vforkRecs(func(p, c *Process) {}), ""},
		{"child with memory", vforkRecs(func(p, c *Process) { c.VMAs = sampleChild().VMAs }), "process 43: a vfork() child of 42 (parent 42) with memory"},
		{"child of another", vforkRecs(func(p, c *Process) { c.VforkOf = 41 }), "process 43: a vfork() child of 41 (parent 42)"},
		{"parent not in vfork", vforkRecs(func(p, c *Process) { p.Threads[0].Regs.OrigRax = 0 }), "process 43: a vfork() child of 42, which is not one thread inside vfork()"},
		{"parent with two threads", vforkRecs(func(p, c *Process) { p.Threads = append(p.Threads, Thread{TID: 44, Regs: Regs{OrigRax: sysVfork}}) }), "which is not one thread inside vfork()"},
		{"pages of the child", append(vforkRecs(func(p, c *Process) {}), rawRec{TypePages, &Pages{PID: 43, Runs: []PageRun{{Addr: 0x1000, Pages: 1, Zero: true}}}, nil}),
			"pages of process 43, a vfork() child in the memory of 42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readImage(rawImage(t, tt.recs))
			switch {
			case tt.text == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.text == "":
			case !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.text):
				t.Fatalf("got %v, want ErrInvalid saying %q", err, tt.text)
			}
		})
	}
}

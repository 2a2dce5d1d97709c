package bpftask

// batch gathers reads of kernel memory that do not depend on each other
// and runs them together, memSlots to an iterator run: each read's
// callback may ask for more, which the next round runs, until none is
// asked for or one failed.
type batch struct {
	r    *UnixReader
	reqs []memReq
	cbs  []func([]byte)
	err  error
}

// get asks for n bytes at addr, given to then (a read of more than
// memSlot bytes in several pieces, joined).
func (b *batch) get(addr uint64, n int, then func([]byte)) {
	if n <= 0 {
		then(nil)
		return
	}
	if n <= memSlot {
		b.reqs = append(b.reqs, memReq{addr, uint32(n)})
		b.cbs = append(b.cbs, then)
		return
	}
	out := make([]byte, n)
	left := 0
	for off := 0; off < n; off += memSlot {
		size := min(memSlot, n-off)
		left++
		b.reqs = append(b.reqs, memReq{addr + uint64(off), uint32(size)})
		b.cbs = append(b.cbs, func(p []byte) {
			copy(out[off:], p)
			if left--; left == 0 {
				then(out)
			}
		})
	}
}

// fail records the first error: no read runs after it.
func (b *batch) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// run runs the reads asked for, round after round.
func (b *batch) run() error {
	for len(b.reqs) > 0 && b.err == nil {
		reqs, cbs := b.reqs, b.cbs
		b.reqs, b.cbs = nil, nil
		parts, err := b.r.read(reqs...)
		if err != nil {
			return err
		}
		for i, cb := range cbs {
			if b.err != nil {
				break
			}
			cb(parts[i])
		}
	}
	return b.err
}

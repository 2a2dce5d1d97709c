package restore

// The private and file mappings of a process being built are made in
// batches of calls in the leader (threadBatch): a mapping, its name and
// its advice cost no ptrace stop of their own.

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// mapBatch collects the calls of mapVMAs.
type mapBatch struct {
	b      *builder
	tb     *threadBatch
	landed []func(res []uint64) error // checks of where each mapping landed
}

func (b *builder) newMapBatch() *mapBatch {
	return &mapBatch{b: b, tb: &threadBatch{b: b, in: &b.in, reg: wholeRegion, data: wholeRegion.data}}
}

// mapAt adds the calls that map v at its address, name it and give it
// its advice, as builder.mapAt makes them. A huge-page mapping is made at
// once, after the calls so far (its failure says how many huge pages
// are free).
func (m *mapBatch) mapAt(v *image.VMA, flags int, fd, off uint64) error {
	if v.HugePageSize != 0 {
		if err := m.run(); err != nil {
			return err
		}
		return m.b.mapAt(v, flags, fd, off)
	}
	tb := m.tb
	k := tb.add(fmt.Sprintf("mmap %#x-%#x %s", v.Start, v.End, v.Name), unix.SYS_MMAP,
		v.Start, v.Len(), uint64(mapProt(v)), uint64(mmapFlags(v, flags)), fd, off)
	m.landed = append(m.landed, func(res []uint64) error {
		if res[k] != v.Start {
			return fmt.Errorf("mmap %#x-%#x landed at %#x", v.Start, v.End, res[k])
		}
		return nil
	})
	if name, ok := anonName(v); ok {
		// The name given with prctl(PR_SET_VMA_ANON_NAME).
		addr, err := tb.put(append([]byte(name), 0))
		if err != nil {
			return err
		}
		tb.add("prctl(PR_SET_VMA_ANON_NAME) "+v.Name, unix.SYS_PRCTL, prSetVMA, prSetVMAAnonName, v.Start, v.Len(), addr)
	}
	for _, a := range v.Advice {
		// The advice shows in smaps (and MADV_DONTFORK,
		// MADV_WIPEONFORK change what a fork does): never dropped.
		tb.add(fmt.Sprintf("madvise(%d) on %#x-%#x", a, v.Start, v.End), unix.SYS_MADVISE, v.Start, v.Len(), uint64(a))
	}
	return nil
}

// run makes the calls so far and checks where the mappings landed.
func (m *mapBatch) run() error {
	res, err := m.tb.run()
	if err != nil {
		return err
	}
	for _, landed := range m.landed {
		if err := landed(res); err != nil {
			return err
		}
	}
	m.landed = nil
	return nil
}

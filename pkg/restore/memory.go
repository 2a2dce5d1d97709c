package restore

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

const (
	maxIov = 1024
	// maxRecordData bounds the data of one pages record we accept.
	maxRecordData = 1 << 30
)

// pagesChunk is one pages record read from the image.
type pagesChunk struct {
	meta image.Pages
	buf  []byte
	// check verifies buf against the record's checksum. The writing
	// goroutine runs it before a byte goes into a process, so that the
	// reading one (on a transfer, the one that drains the socket) only
	// reads.
	check func() error
	err   error
}

// pageStream reads the pages records in one goroutine while their
// contents are written into the processes with process_vm_writev (or
// UFFDIO_COPY) in this one, so that reading the image and filling memory
// overlap. The records come process by process in image order (checked by
// pkg/image): writeUpTo fills the processes up to one, so that a child is
// forked from its parent once the parent's pages are in (see create). It
// reads up to the end record, so a truncated or corrupt image fails before
// any process could run. The record order and each record's runs are
// checked by pkg/image; what is checked here is how the runs fit the
// process's VMAs.
type pageStream struct {
	chunks  chan pagesChunk
	free    chan []byte
	stop    chan struct{}
	pending *pagesChunk // read, for a process not filled yet
	zero    []byte
	total   int64
	done    int64
	elapsed time.Duration
}

// openPages starts reading the pages records of pr.
func (t *tree) openPages(pr *image.PagesReader) *pageStream {
	s := &pageStream{chunks: make(chan pagesChunk, 2), free: make(chan []byte, 3), stop: make(chan struct{}), zero: make([]byte, 1<<20)}
	for _, b := range t.procs {
		for _, v := range b.p.VMAs {
			s.total += int64(v.Pages) * image.PageSize
		}
	}
	for i := 0; i < cap(s.free); i++ {
		s.free <- nil
	}
	go func() {
		defer close(s.chunks)
		for {
			var c pagesChunk
			c.err = func() error {
				pg, n, err := pr.Next()
				if err != nil {
					return err
				}
				c.meta = *pg
				if n > maxRecordData {
					return fmt.Errorf("pages of process %d: %d data bytes: %w", pg.PID, n, image.ErrCorrupt)
				}
				var buf []byte
				select {
				case buf = <-s.free:
				case <-s.stop:
					return io.EOF
				}
				if int64(cap(buf)) < n {
					buf = make([]byte, n)
				}
				c.buf = buf[:n]
				c.check, err = pr.ReadDataLater(c.buf)
				return err
			}()
			if c.err == io.EOF {
				return
			}
			select {
			case s.chunks <- c:
			case <-s.stop:
				return
			}
			if c.err != nil {
				return
			}
		}
	}()
	return s
}

// close stops the reading goroutine.
func (s *pageStream) close() { close(s.stop) }

// next returns the next record without taking it, nil at the end.
func (s *pageStream) next() (*pagesChunk, error) {
	if s.pending == nil {
		c, ok := <-s.chunks
		if !ok {
			return nil, nil
		}
		s.pending = &c
	}
	if s.pending.err != nil {
		return nil, s.pending.err
	}
	return s.pending, nil
}

// writeUpTo writes the pages of the processes up to the i-th of the
// image (they are laid out), stopping at the first record of a later one.
func (t *tree) writeUpTo(s *pageStream, i int) error {
	start := time.Now()
	defer func() { s.elapsed += time.Since(start) }()
	for {
		c, err := s.next()
		if err != nil || c == nil {
			return err
		}
		at, ok := t.index[c.meta.PID]
		if !ok || t.procs[at].p.Zombie {
			return fmt.Errorf("pages for pid %d, which the image does not hold: %w", c.meta.PID, image.ErrCorrupt)
		}
		if at > i {
			return nil
		}
		b := t.procs[at]
		if b.target == 0 || b.gadget == 0 {
			return fmt.Errorf("pages of process %d before it is laid out: %w", b.p.PID, image.ErrCorrupt)
		}
		s.pending = nil
		if err := c.check(); err != nil {
			return err
		}
		n, err := b.writeChunk(c, s.zero)
		if err != nil {
			return fmt.Errorf("process %d: %w", b.p.PID, err)
		}
		s.done += n
		if t.opts.Progress != nil {
			t.opts.Progress(s.done, s.total)
		}
		s.free <- c.buf
	}
}

// finish reads up to the end of the pages: none may be left.
func (t *tree) finishPages(s *pageStream) error {
	c, err := s.next()
	if err != nil {
		return err
	}
	if c != nil {
		return fmt.Errorf("pages for pid %d after its turn: %w", c.meta.PID, image.ErrCorrupt)
	}
	t.memTime = s.elapsed
	return nil
}

// vmaAt finds the VMA holding [addr, addr+n).
func (b *builder) vmaAt(addr, n uint64) *image.VMA {
	vs := b.p.VMAs
	i := sort.Search(len(vs), func(i int) bool { return vs[i].End > addr })
	if i < len(vs) && vs[i].Start <= addr && addr+n <= vs[i].End {
		return &vs[i]
	}
	return nil
}

// writeChunk writes one record's runs; it returns the bytes covered.
func (b *builder) writeChunk(c *pagesChunk, zero []byte) (int64, error) {
	var local []unix.Iovec
	var remote []unix.RemoteIovec
	var want int
	flush := func() error {
		if len(local) == 0 {
			return nil
		}
		got, err := unix.ProcessVMWritev(int(b.target), local, remote, 0)
		if err != nil {
			return fmt.Errorf("process_vm_writev: %w", err)
		}
		if got != want {
			return fmt.Errorf("process_vm_writev wrote %d of %d bytes", got, want)
		}
		b.bytes += int64(want)
		local, remote, want = local[:0], remote[:0], 0
		return nil
	}
	add := func(src []byte, addr uint64) error {
		if len(local) == maxIov {
			if err := flush(); err != nil {
				return err
			}
		}
		iov := unix.Iovec{Base: &src[0]}
		iov.SetLen(len(src))
		local = append(local, iov)
		remote = append(remote, unix.RemoteIovec{Base: uintptr(addr), Len: len(src)})
		want += len(src)
		return nil
	}
	if err := b.dropFor(c.meta.Runs); err != nil {
		return 0, err
	}
	off := uint64(0)
	var covered int64
	for _, r := range c.meta.Runs {
		n := r.Pages * image.PageSize
		if r.Pages == 0 || n/image.PageSize != r.Pages || r.Addr%image.PageSize != 0 {
			return 0, fmt.Errorf("pages run %#x+%d malformed: %w", r.Addr, r.Pages, image.ErrCorrupt)
		}
		v := b.vmaAt(r.Addr, n)
		if v == nil || v.Pages == 0 {
			return 0, fmt.Errorf("pages run %#x+%d outside any VMA holding pages: %w", r.Addr, r.Pages, image.ErrCorrupt)
		}
		covered += int64(n)
		if r.Parent {
			// The parent's pages, there since the fork (cow.go).
			if !b.inherited[v] {
				return 0, fmt.Errorf("pages run %#x+%d of the parent's in a VMA not inherited: %w", r.Addr, r.Pages, image.ErrCorrupt)
			}
			b.shared += int64(r.Pages)
			continue
		}
		if r.Zero {
			// Fresh anonymous memory reads zero already (as does an
			// inherited VMA's, dropped by dropFor); a private file page
			// that was zeroed must be written.
			if v.Kind != image.VMAFile {
				continue
			}
			for o := uint64(0); o < n; o += uint64(len(zero)) {
				if err := add(zero[:min(uint64(len(zero)), n-o)], r.Addr+o); err != nil {
					return 0, err
				}
			}
			continue
		}
		if off+n > uint64(len(c.buf)) {
			return 0, fmt.Errorf("pages runs need more than the record's %d data bytes: %w", len(c.buf), image.ErrCorrupt)
		}
		if v.Kind == image.VMASysVShm {
			// Through ckpt-redo's own attachment: the process's may be
			// read-only.
			if err := b.t.sysvWrite(v, r.Addr, c.buf[off:off+n]); err != nil {
				return 0, err
			}
			b.bytes += int64(n)
		} else if b.filler.covers(v) {
			if err := b.filler.copy(b.target, r.Addr, c.buf[off:off+n]); err != nil {
				return 0, err
			}
			b.bytes += int64(n)
		} else if err := add(c.buf[off:off+n], r.Addr); err != nil {
			return 0, err
		}
		off += n
		b.pages += int64(r.Pages)
	}
	if off != uint64(len(c.buf)) {
		return 0, fmt.Errorf("pages record has %d data bytes, its runs use %d: %w", len(c.buf), off, image.ErrCorrupt)
	}
	return covered, flush()
}

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

// writePages reads the pages records in one goroutine and writes their
// contents into the new process with process_vm_writev in this one, so that
// reading the image and filling memory overlap. It reads up to the end
// record, so a truncated or corrupt image fails here, before the process
// could run. The record order and each record's runs are checked by
// pkg/image; what is checked here is how the runs fit this process's VMAs.
func (t *tree) writePages(pr *image.PagesReader) error {
	defer t.sysvDetach()
	start := time.Now()
	var total int64
	for _, b := range t.procs {
		for _, v := range b.p.VMAs {
			total += int64(v.Pages) * image.PageSize
		}
	}
	chunks := make(chan pagesChunk, 2)
	free := make(chan []byte, 3)
	for i := 0; i < cap(free); i++ {
		free <- nil
	}
	stop := make(chan struct{})
	go func() {
		defer close(chunks)
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
				case buf = <-free:
				case <-stop:
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
			case chunks <- c:
			case <-stop:
				return
			}
			if c.err != nil {
				return
			}
		}
	}()
	defer close(stop)
	zero := make([]byte, 1<<20)
	var done int64
	for c := range chunks {
		if c.err != nil {
			return c.err
		}
		if err := c.check(); err != nil {
			return err
		}
		b, ok := t.byPID[c.meta.PID]
		if !ok || b.p.Zombie {
			return fmt.Errorf("pages for pid %d, which the image does not hold: %w", c.meta.PID, image.ErrCorrupt)
		}
		n, err := b.writeChunk(&c, zero)
		if err != nil {
			return fmt.Errorf("process %d: %w", b.p.PID, err)
		}
		done += n
		if t.opts.Progress != nil {
			t.opts.Progress(done, total)
		}
		free <- c.buf
	}
	t.memTime = time.Since(start)
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
		got, err := unix.ProcessVMWritev(b.target, local, remote, 0)
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
		if r.Zero {
			// Fresh anonymous memory reads zero already; a private file
			// page that was zeroed must be written.
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

package dump

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

const (
	pageSize = image.PageSize
	// batchBytes is how much memory one process_vm_readv call moves, and
	// the data size of one pages record. Reading and writing overlap
	// batch by batch, but the first batch is read before anything is
	// written and the last written after everything is read: 4 MiB
	// keeps those two ends short (16 MiB batches cost 2–4 ms more on a
	// 64 MiB dump here), and is still large enough that the system calls
	// per batch do not count.
	batchBytes = 4 << 20
	// maxIov is the kernel's IOV_MAX.
	maxIov = 1024

	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61 // file page or shared anonymous
)

// planEnv is what planMemory needs besides the process: the tree's
// shared memory objects, the process's parent (nil for the root), whether
// to keep its frames for its children, the zero page's frame.
type planEnv struct {
	shm        shmObjects
	parent     *cowParent
	keepFrames bool
	zeroPFN    uint64
}

// run is a run of pages to store.
type run struct {
	addr  uint64
	pages uint64
	// force reads through /proc/PID/mem: memory without PROT_READ, and
	// anonymous pages the process may share (not PM_MMAP_EXCLUSIVE):
	// process_vm_readv pins pages, and pinning a shared anonymous page
	// for reading makes the kernel give the process its own copy first,
	// which would undo the sharing in a process left running (and cost
	// a copy of every shared page).
	force bool
	// parent marks pages that are the parent's frames (cow.go): recorded,
	// not read.
	parent bool
}

// size is the bytes of data the run needs.
func (r run) size() uint64 {
	if r.parent {
		return 0
	}
	return r.pages * pageSize
}

// memPlan is the list of page runs to store, in address order.
type memPlan struct {
	runs  []run
	pages int64
	// frames are the frames of the private pages, kept for the
	// process's children (nil if it has none in the dump).
	frames *frames
}

// wantPages says which pages of a VMA hold content that is not elsewhere:
// for private file mappings only the pages that were written to (they are
// anonymous now); for anonymous memory every present or swapped page.
func wantPages(v *image.VMA) (want bool, onlyAnon bool) {
	switch v.Kind {
	case image.VMAVDSO, image.VMAVvar, image.VMAVsyscall, image.VMAAIO:
		return false, false
	case image.VMAFile:
		if v.Shared {
			return false, false // the file holds it
		}
		return true, true
	case image.VMAShmAnon, image.VMASysVShm:
		return true, false
	}
	return true, false
}

// planMemory reads pagemap and picks the pages to store, counting them in
// each VMA. Shared memory is planned from the object itself (see
// shmObject): each of its pages once, with the first mapping of the tree
// that covers it. Pages that are parent's frames (cow.go) are planned as
// the parent's; with keepFrames the frames of p's own private pages are
// kept in the plan, for its children.
func planMemory(pid sys.PID, p *image.Process, env *planEnv) (*memPlan, error) {
	pm, err := os.Open(proc.Path(pid, "pagemap"))
	if err != nil {
		return nil, fmt.Errorf("open pagemap: %w", err)
	}
	defer pm.Close()
	vmas := p.VMAs
	shm, parent := env.shm, env.parent
	plan := &memPlan{}
	if env.keepFrames {
		plan.frames = &frames{}
	}
	const chunk = 64 << 10 // entries per read
	buf := make([]byte, chunk*8)
	for i := range vmas {
		v := &vmas[i]
		want, onlyAnon := wantPages(v)
		if !want {
			continue
		}
		if v.Kind == image.VMAShmAnon || v.Kind == image.VMASysVShm {
			o, err := shm.object(pid, v)
			if err != nil {
				return nil, err
			}
			o.plan(v, plan)
			continue
		}
		force := v.Prot&unix.PROT_READ == 0
		first := len(plan.runs) // runs never span two VMAs
		sh := parent.sharerFor(p, v)
		keep := plan.frames != nil && keepsFrames(v)
		npages := v.Len() / pageSize
		for off := uint64(0); off < npages; off += chunk {
			n := min(npages-off, chunk)
			addr := v.Start + off*pageSize
			b := buf[:n*8]
			if _, err := pm.ReadAt(b, int64(addr/pageSize*8)); err != nil {
				return nil, fmt.Errorf("read pagemap at %#x: %w", addr, err)
			}
			for j := uint64(0); j < n; j++ {
				e := binary.LittleEndian.Uint64(b[j*8:])
				if e&(pmPresent|pmSwapped) == 0 || (onlyAnon && e&pmFile != 0) {
					continue
				}
				a := addr + j*pageSize
				par := sh.parents(a, e)
				force := force || mayShare(e, env.zeroPFN)
				if keep && e&pmPresent != 0 && e&pmPFN != 0 {
					plan.frames.add(a, e&pmPFN)
				}
				if k := len(plan.runs) - 1; k >= first && plan.runs[k].addr+plan.runs[k].pages*pageSize == a &&
					plan.runs[k].force == force && plan.runs[k].parent == par {
					plan.runs[k].pages++
				} else {
					plan.runs = append(plan.runs, run{addr: a, pages: 1, force: force, parent: par})
				}
				v.Pages++
				if par {
					v.ParentPages++
				}
				plan.pages++
			}
		}
	}
	return plan, nil
}

type memStats struct {
	pages, zero, parent, bytes int64
	elapsed                    time.Duration
}

// batch is a buffer of pages read from the process, ready to be written:
// its zero pages are left out and its record is encoded and checksummed
// by the reading goroutine, so that the writing one (on a transfer, the
// one that feeds the socket) only writes.
type batch struct {
	pid   sys.PID
	buf   []byte
	runs  []run
	rec   *image.Prepared
	n     int   // bytes of buf the record holds
	nzero int64 // zero pages left out
	err   error
}

// dumpMemory reads the planned pages with process_vm_readv in large
// batches and writes them as pages records, reading the next batch while
// the previous one is written. If readDone is set, reading runs ahead of
// writing into as many buffers as memory allows (see bufferLimit), and
// readDone is called — on this goroutine, which owns the ptrace session —
// as soon as the last page has been read.
func dumpMemory(jobs []memJob, sink Sink, progress func(done, total int64), readDone func()) (memStats, error) {
	start := time.Now()
	var st memStats
	type work struct {
		pid, rd sys.PID // rd: the PID its memory is read through
		runs    []run
	}
	var batches []work
	var total int64
	for _, j := range jobs {
		for _, b := range splitBatches(j.plan.runs) {
			batches = append(batches, work{j.pid, j.readPID(), b})
		}
		total += j.plan.pages * pageSize
	}
	nbuf := 3
	if readDone != nil {
		nbuf = max(nbuf, int(bufferLimit(total)/batchBytes))
	}
	free := make(chan []byte, nbuf)
	for i := 0; i < nbuf; i++ {
		free <- nil // allocated on first use
	}
	full := make(chan batch, nbuf)
	allocated := make(chan []byte, nbuf)
	stop := make(chan struct{})
	allRead := make(chan struct{})
	exited := make(chan struct{})
	defer func() {
		// Stop the reader, wait for it, then unmap what it allocated.
		close(stop)
		<-exited
		close(allocated)
		for b := range allocated {
			unix.Munmap(b)
		}
	}()
	zero := make([]byte, pageSize)
	go func() {
		defer close(exited)
		defer close(full)
		for _, b := range batches {
			var buf []byte
			select {
			case buf = <-free:
			case <-stop:
				return
			}
			if buf == nil {
				var err error
				if buf, err = allocBuffer(batchBytes); err != nil {
					select {
					case full <- batch{err: err}:
					case <-stop:
					}
					return
				}
				allocated <- buf
			}
			bt := batch{pid: b.pid, buf: buf, runs: b.runs}
			if err := readBatch(b.rd, buf, b.runs); err != nil {
				bt.err = fmt.Errorf("process %d: %w", b.pid, err)
			} else {
				var meta []image.PageRun
				meta, bt.n, bt.nzero = compact(buf, b.runs, zero)
				bt.rec, bt.err = image.PreparePages(&image.Pages{PID: b.pid, Runs: meta}, buf[:bt.n])
			}
			err := bt.err
			select {
			case full <- bt:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
		close(allRead)
	}()
	var done int64
	ready := allRead
	if readDone == nil {
		ready = nil
	}
	for {
		var b batch
		var ok bool
		select {
		case <-ready:
			readDone()
			ready = nil
			continue
		case b, ok = <-full:
		}
		if !ok {
			break
		}
		if b.err != nil {
			return st, b.err
		}
		if err := sink.WritePrepared(b.rec); err != nil {
			return st, err
		}
		st.bytes += int64(b.n)
		st.pages += int64(b.n / pageSize)
		st.zero += b.nzero
		for _, r := range b.runs {
			done += int64(r.pages * pageSize)
			if r.parent {
				st.parent += int64(r.pages)
			}
		}
		if progress != nil {
			progress(done, total)
		}
		free <- b.buf
	}
	if ready != nil {
		readDone()
	}
	st.elapsed = time.Since(start)
	return st, nil
}

// allocBuffer maps a buffer backed by huge pages where the kernel allows:
// a dump's buffers are touched once, and 4 KiB page faults would cost more
// than the copy into them.
func allocBuffer(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("allocate %d bytes: %w", n, err)
	}
	unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b, nil
}

// bufferLimit is how much memory a --leave-running dump may hold in
// buffers to shorten the freeze: all of it if half the available memory
// allows.
func bufferLimit(want int64) int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	avail := int64(si.Freeram+si.Bufferram) * int64(si.Unit) / 2
	return min(want+batchBytes, avail)
}

// memJob is the memory of one process to dump.
type memJob struct {
	pid  sys.PID
	plan *memPlan
	rd   sys.PID // the PID to read through, if not pid (frozen.via)
}

func (j memJob) readPID() sys.PID {
	if j.rd != 0 {
		return j.rd
	}
	return j.pid
}

// splitBatches cuts runs into batches of at most batchBytes and maxIov runs.
func splitBatches(runs []run) [][]run {
	var out [][]run
	var cur []run
	var size uint64
	for _, r := range runs {
		if r.parent && len(cur) < maxIov {
			cur = append(cur, r) // no data
			continue
		}
		for r.pages > 0 {
			room := (batchBytes - size) / pageSize
			if room == 0 || len(cur) == maxIov {
				out = append(out, cur)
				cur, size = nil, 0
				continue
			}
			n := min(r.pages, room)
			if r.parent {
				n = r.pages
			}
			cur = append(cur, run{addr: r.addr, pages: n, force: r.force, parent: r.parent})
			if !r.parent {
				size += n * pageSize
			}
			r.addr += n * pageSize
			r.pages -= n
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func readBatch(pid sys.PID, buf []byte, runs []run) error {
	var remote []unix.RemoteIovec
	var size int
	var mem *os.File
	defer func() {
		if mem != nil {
			mem.Close()
		}
	}()
	for _, r := range runs {
		n := int(r.size())
		if r.parent {
			continue
		}
		if r.force {
			if mem == nil {
				var err error
				if mem, err = os.Open(proc.Path(pid, "mem")); err != nil {
					return err
				}
			}
			if _, err := mem.ReadAt(buf[size:size+n], int64(r.addr)); err != nil {
				return fmt.Errorf("read %#x+%d through /proc/%d/mem: %w", r.addr, r.pages, pid, err)
			}
		} else {
			remote = append(remote, unix.RemoteIovec{Base: uintptr(r.addr), Len: n})
		}
		size += n
	}
	if len(remote) == 0 {
		return nil
	}
	// The forced runs were read in place; read the rest in one call, each
	// remote run landing at its own offset.
	var local []unix.Iovec
	off := 0
	want := 0
	for _, r := range runs {
		n := int(r.size())
		if !r.force && !r.parent {
			iov := unix.Iovec{Base: &buf[off]}
			iov.SetLen(n)
			local = append(local, iov)
			want += n
		}
		off += n
	}
	got, err := unix.ProcessVMReadv(int(pid), local, remote, 0)
	if err != nil {
		return fmt.Errorf("process_vm_readv of %d runs: %w", len(remote), err)
	}
	if got != want {
		return fmt.Errorf("process_vm_readv read %d of %d bytes", got, want)
	}
	return nil
}

// compact turns a batch into pages runs, moving the pages with data
// together at the front of buf and recording all-zero pages as zero runs;
// runs of the parent's pages stay as they are (no data).
// It returns the runs, the data length and the number of zero pages.
func compact(buf []byte, runs []run, zero []byte) ([]image.PageRun, int, int64) {
	var out []image.PageRun
	var nzero int64
	src, dst := 0, 0
	for _, r := range runs {
		if r.parent {
			out = append(out, image.PageRun{Addr: r.addr, Pages: r.pages, Parent: true})
			continue
		}
		first := len(out) // output runs stay within their input run
		for i := uint64(0); i < r.pages; i++ {
			page := buf[src : src+pageSize]
			addr := r.addr + i*pageSize
			isZero := bytes.Equal(page, zero)
			if isZero {
				nzero++
			} else {
				if dst != src {
					copy(buf[dst:dst+pageSize], page)
				}
				dst += pageSize
			}
			src += pageSize
			if k := len(out) - 1; k >= first && out[k].Zero == isZero && out[k].Addr+out[k].Pages*pageSize == addr {
				out[k].Pages++
			} else {
				out = append(out, image.PageRun{Addr: addr, Pages: 1, Zero: isZero})
			}
		}
	}
	return out, dst, nzero
}

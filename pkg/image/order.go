package image

import (
	"fmt"
	"slices"

	"github.com/ckpt/ckpt/internal/sys"
)

// checker follows an image record by record and refuses what the format
// does not allow: a record out of order (ErrOrder) or one whose content a
// reader cannot rely on (ErrInvalid). It is the one place that knows the
// record order; Writer runs it before a record is written, the reading
// side (ReadMeta, PagesReader) after a record is read, so that a writer
// cannot produce an image its reader would refuse.
type checker struct {
	stage  Type // type of the last record accepted, 0 before the first
	hdr    Header
	procs  map[sys.PID]*Process // by PID
	nprocs int
	files  map[int]bool // File.IDs of every process
	data   map[int]bool // FileData IDs
	refs   []dataRef    // FileData IDs the processes name
	// order is each process's place in the image; pagesAt the place of
	// the process whose pages came last, pagesEnd the end of its last
	// run: the pages of a process come together, in address order, and
	// the processes' in image order (a restore forks a child from its
	// parent once the parent's pages are in).
	order    map[sys.PID]int
	pagesAt  int
	pagesEnd uint64
}

// dataRef is a FileData ID named by a process's metadata.
type dataRef struct {
	pid  sys.PID
	what string
	id   int
}

func newChecker() *checker {
	return &checker{procs: map[sys.PID]*Process{}, files: map[int]bool{}, data: map[int]bool{}, order: map[sys.PID]int{}, pagesAt: -1}
}

// rank is a record type's place in the order.
func rank(t Type) int {
	switch t {
	case TypeHeader:
		return 1
	case TypeProcess:
		return 2
	case TypeFileData:
		return 3
	case TypePages:
		return 4
	case TypeEnd:
		return 5
	}
	return 0
}

// enter moves to a record of type t, checking it may come now.
func (c *checker) enter(t Type) error {
	switch {
	case rank(t) == 0:
		return fmt.Errorf("unknown record type %d: %w", uint32(t), ErrCorrupt)
	case c.stage == 0 && t != TypeHeader:
		return fmt.Errorf("%s record first, want the header: %w", t, ErrOrder)
	case c.stage != 0 && t == TypeHeader:
		return fmt.Errorf("a second header: %w", ErrOrder)
	case rank(t) < rank(c.stage):
		return fmt.Errorf("%s record after %s records: %w", t, c.stage, ErrOrder)
	}
	if rank(t) > rank(TypeProcess) && rank(c.stage) <= rank(TypeProcess) {
		if err := c.endProcesses(t); err != nil {
			return err
		}
	}
	if rank(t) > rank(TypeFileData) && rank(c.stage) <= rank(TypeFileData) {
		for _, r := range c.refs {
			if !c.data[r.id] {
				return fmt.Errorf("process %d: %s: file data %d is not in the image: %w", r.pid, r.what, r.id, ErrInvalid)
			}
		}
	}
	c.stage = t
	return nil
}

// endProcesses checks, when the first record after the processes comes,
// that they are all there and that every fd names a file of the image.
func (c *checker) endProcesses(next Type) error {
	if c.nprocs == 0 {
		return fmt.Errorf("%s record before any process: %w", next, ErrOrder)
	}
	if c.nprocs != c.hdr.Processes {
		return fmt.Errorf("the header announces %d processes, the image holds %d: %w", c.hdr.Processes, c.nprocs, ErrInvalid)
	}
	pids := make([]sys.PID, 0, len(c.procs))
	for pid := range c.procs {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		for _, fd := range c.procs[pid].FDs {
			if !c.files[fd.File] {
				return fmt.Errorf("process %d: fd %d: file %d is listed by no process of the image: %w", pid, fd.FD, fd.File, ErrInvalid)
			}
		}
	}
	return nil
}

// header checks the header record.
func (c *checker) header(h *Header) error {
	if err := c.enter(TypeHeader); err != nil {
		return err
	}
	if err := checkHeader(h); err != nil {
		return err
	}
	c.hdr = *h
	return nil
}

// process checks a process record.
func (c *checker) process(p *Process) error {
	if err := c.enter(TypeProcess); err != nil {
		return err
	}
	if c.nprocs == c.hdr.Processes {
		return fmt.Errorf("process %d: one more than the %d the header announces: %w", p.PID, c.hdr.Processes, ErrInvalid)
	}
	if c.nprocs == 0 && p.PID != c.hdr.Root {
		return fmt.Errorf("process %d first, the header's root is %d: %w", p.PID, c.hdr.Root, ErrInvalid)
	}
	if err := checkProcess(p); err != nil {
		return err
	}
	if c.procs[p.PID] != nil {
		return fmt.Errorf("process %d: a second record for it: %w", p.PID, ErrInvalid)
	}
	for _, f := range p.Files {
		if c.files[f.ID] {
			return fmt.Errorf("process %d: file %d (%s): another file has that ID: %w", p.PID, f.ID, f.Kind, ErrInvalid)
		}
		c.files[f.ID] = true
	}
	if err := c.vforkParent(p); err != nil {
		return err
	}
	if err := c.inherited(p); err != nil {
		return err
	}
	c.refs = append(c.refs, dataRefs(p)...)
	c.procs[p.PID] = p
	c.order[p.PID] = c.nprocs
	c.nprocs++
	return nil
}

// inherited checks that every VMA of p holding pages of its parent
// (ParentPages) is one a fork of its parent gives: the parent is an
// earlier live process of the image with the same VMA (Inherits).
func (c *checker) inherited(p *Process) error {
	for i := range p.VMAs {
		v := &p.VMAs[i]
		if v.ParentPages == 0 {
			continue
		}
		parent := c.procs[p.PPID]
		if parent == nil || parent.Zombie {
			return fmt.Errorf("process %d: vma %#x-%#x holds pages of its parent %d, which is not a live process before it: %w",
				p.PID, v.Start, v.End, p.PPID, ErrInvalid)
		}
		if !Inherits(p, v, parent, parent.VMAAt(v.Start, v.Len())) {
			return fmt.Errorf("process %d: vma %#x-%#x holds pages of its parent %d, which has no such mapping to fork: %w",
				p.PID, v.Start, v.End, p.PPID, ErrInvalid)
		}
	}
	return nil
}

// sysVfork is the number of vfork(2) on x86-64.
const sysVfork = 58

// vforkParent checks the parent of a vfork() child (Process.VforkOf): an
// earlier live process of the image, with one thread, inside the vfork
// system call, and waiting for no other child.
func (c *checker) vforkParent(p *Process) error {
	if p.VforkOf == 0 {
		return nil
	}
	parent := c.procs[p.VforkOf]
	switch {
	case parent == nil || parent.Zombie:
		return fmt.Errorf("process %d: a vfork() child of %d, which is not a live process before it: %w", p.PID, p.VforkOf, ErrInvalid)
	case len(parent.Threads) != 1 || parent.Threads[0].Regs.OrigRax != sysVfork || parent.VforkOf != 0:
		return fmt.Errorf("process %d: a vfork() child of %d, which is not one thread inside vfork(): %w", p.PID, p.VforkOf, ErrInvalid)
	}
	for _, q := range c.procs {
		if q.VforkOf == p.VforkOf {
			return fmt.Errorf("process %d: a vfork() child of %d, whose vfork() child is %d: %w", p.PID, p.VforkOf, q.PID, ErrInvalid)
		}
	}
	return nil
}

// dataRefs lists the FileData IDs a process's metadata names: the content
// of deleted files (opened or mapped), bytes buffered in pipes, socket
// queues.
func dataRefs(p *Process) []dataRef {
	var refs []dataRef
	add := func(id int, format string, args ...any) {
		if id != 0 {
			refs = append(refs, dataRef{p.PID, fmt.Sprintf(format, args...), id})
		}
	}
	for i, m := range p.Mapped {
		add(m.DataID, "mapped file %d (%s)", i, m.Path)
	}
	for _, f := range p.Files {
		add(f.Ref.DataID, "file %d (%s)", f.ID, f.Ref.Path)
		if f.Pipe != nil {
			add(f.Pipe.DataID, "file %d (pipe:[%d])", f.ID, f.Pipe.Ino)
		}
		if s := f.Socket; s != nil {
			add(s.RecvDataID, "file %d (socket) receive queue", f.ID)
			add(s.SendDataID, "file %d (socket) send queue", f.ID)
			for i, id := range s.RecvMsgs {
				add(id, "file %d (socket) message %d", f.ID, i)
			}
			ws := slices.Clone(s.Orphans)
			if s.Waiting != nil {
				ws = append(ws, *s.Waiting)
			}
			for i, w := range ws {
				for j, id := range w.Msgs {
					add(id, "file %d (socket) waiting connection %d message %d", f.ID, i, j)
				}
			}
		}
	}
	return refs
}

// fileData checks a file data record with dataLen bytes of data.
func (c *checker) fileData(fd *FileData, dataLen int64) error {
	if err := c.enter(TypeFileData); err != nil {
		return err
	}
	switch {
	case fd.ID <= 0:
		return fmt.Errorf("file data %d: ID not positive: %w", fd.ID, ErrInvalid)
	case c.data[fd.ID]:
		return fmt.Errorf("file data %d: a second record for it: %w", fd.ID, ErrInvalid)
	case fd.Size < 0 || fd.Size > dataLen || dataLen-fd.Size >= PageSize:
		return fmt.Errorf("file data %d: size %d in %d data bytes: %w", fd.ID, fd.Size, dataLen, ErrInvalid)
	}
	c.data[fd.ID] = true
	return nil
}

// pages checks a pages record with dataLen bytes of data.
func (c *checker) pages(pg *Pages, dataLen int64) error {
	if err := c.enter(TypePages); err != nil {
		return err
	}
	p := c.procs[pg.PID]
	if p == nil {
		return fmt.Errorf("pages of process %d, which the image does not hold: %w", pg.PID, ErrInvalid)
	}
	if p.Zombie {
		return fmt.Errorf("pages of process %d, a zombie: %w", pg.PID, ErrInvalid)
	}
	if p.VforkOf != 0 {
		return fmt.Errorf("pages of process %d, a vfork() child in the memory of %d: %w", pg.PID, p.VforkOf, ErrInvalid)
	}
	if err := checkRuns(pg, dataLen); err != nil {
		return err
	}
	at := c.order[pg.PID]
	switch {
	case at < c.pagesAt:
		return fmt.Errorf("pages of process %d after pages of a later process of the image: %w", pg.PID, ErrOrder)
	case at > c.pagesAt:
		c.pagesAt, c.pagesEnd = at, 0
	}
	for _, r := range pg.Runs {
		v := p.VMAAt(r.Addr, r.Pages*PageSize)
		if v == nil || v.Pages == 0 {
			return fmt.Errorf("pages of process %d: run %#x+%d outside any VMA holding pages: %w", pg.PID, r.Addr, r.Pages, ErrInvalid)
		}
		if r.Parent && v.ParentPages == 0 {
			return fmt.Errorf("pages of process %d: run %#x+%d of the parent's pages in a VMA not inherited: %w", pg.PID, r.Addr, r.Pages, ErrInvalid)
		}
		if r.Addr < c.pagesEnd {
			return fmt.Errorf("pages of process %d: run %#x+%d before the end %#x of its previous run: %w", pg.PID, r.Addr, r.Pages, c.pagesEnd, ErrOrder)
		}
		c.pagesEnd = r.Addr + r.Pages*PageSize
	}
	return nil
}

// end checks the end record may come.
func (c *checker) end() error {
	return c.enter(TypeEnd)
}

package restore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// tree builds every process of an image, and holds what they share: the
// image-wide file table, the files passed through the helper, the gadget
// address.
type tree struct {
	img   *imageMeta
	opts  *Options
	procs []*builder // image order: parents before children
	byPID map[sys.PID]*builder
	index map[sys.PID]int // PID -> place in procs
	files map[int]*image.File

	passBase sys.TargetFD
	passed   []*os.File
	owned    []*os.File
	fileFD   map[int]sys.TargetFD // File.ID -> fd in the new processes before dup3
	shmSrc   map[uint64]shmSource // shared memory object -> where it was created
	sysv     map[int]bool         // SysV segment id -> created by this restore
	sysvMem  map[int][]byte       // SysV segment id -> ckpt-redo's attachment while pages are written
	// sysvMsgMade are the SysV message queues this restore created.
	sysvMsgMade []int
	// inTarget opens, inside a process, the descriptions only it can
	// open (File ID -> how); foreign marks descriptions the user gave
	// (--inherit-fd, --shell-job, --stdio), left as they are.
	inTarget map[int]func(fdkind.Target, sys.TargetFD, bool) error
	foreign  map[int]bool
	// once holds what the fd kinds build once for several descriptions
	// (fdkind.RestoreEnv.Once).
	once   map[any]any
	gadget uint64
	// ctty are the controlling terminals to restore, by session (ctty.go).
	ctty map[sys.PID]ctty

	repairs []repairing // restored connections still in repair mode
	// deferred are the connections a member of a group takes out of
	// repair mode at Release (copies: see Options.Group).
	deferred []repairing
	// outgoing is closed once the lock lets the restored sockets' own
	// packets out (netlock.OpenOutgoing), nil without a lock.
	outgoing <-chan struct{}
	// finally are the socket kinds' last steps (fdkind.SocketRestoreEnv.Finally).
	finally []func() error
	// lock is the network lock covering the restored connections, and
	// ownLock tells that this restore took it (a failed restore lifts
	// it; the dump's own lock stays for a retry).
	lock    string
	ownLock bool
	// conns are copies of the restored connections, live again.
	conns    []*os.File
	memTime  time.Duration
	warnings []string
	// beforeBuild are the kinds' steps run once every process exists
	// (fdkind.RestoreEnv.BeforeBuild).
	beforeBuild []func(target func(pid sys.PID) (fdkind.Target, bool)) error
	// vforks are the vfork() children, by their parents' PIDs: made
	// from their parents once these are built (vfork.go).
	vforks map[sys.PID]*builder
}

func newTree(img *imageMeta, opts *Options) (*tree, error) {
	t := &tree{img: img, opts: opts, byPID: map[sys.PID]*builder{}, index: map[sys.PID]int{}, files: map[int]*image.File{}, foreign: map[int]bool{}}
	for _, p := range img.procs {
		b := &builder{t: t, p: p, opts: opts}
		if _, dup := t.byPID[p.PID]; dup {
			return nil, fmt.Errorf("pid %d twice in the image: %w", p.PID, image.ErrCorrupt)
		}
		t.byPID[p.PID] = b
		t.index[p.PID] = len(t.procs)
		t.procs = append(t.procs, b)
		for i := range p.Files {
			f := &p.Files[i]
			if _, dup := t.files[f.ID]; dup {
				return nil, fmt.Errorf("file %d twice in the image: %w", f.ID, image.ErrCorrupt)
			}
			t.files[f.ID] = f
		}
	}
	for i, b := range t.procs {
		if i > 0 {
			parent, ok := t.byPID[b.p.PPID]
			if !ok || parent.p.Zombie || indexOf(t.procs, parent) > i {
				return nil, fmt.Errorf("process %d: parent %d not before it in the image: %w", b.p.PID, b.p.PPID, image.ErrCorrupt)
			}
		}
		for _, e := range b.p.FDs {
			if _, ok := t.files[e.File]; !ok {
				return nil, fmt.Errorf("process %d fd %d: file %d not in the image: %w", b.p.PID, e.FD, e.File, image.ErrCorrupt)
			}
		}
	}
	if t.procs[0].p.Zombie {
		return nil, fmt.Errorf("the root process is a zombie: %w", image.ErrCorrupt)
	}
	return t, nil
}

func indexOf(bs []*builder, b *builder) int {
	for i, x := range bs {
		if x == b {
			return i
		}
	}
	return -1
}

func (t *tree) warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.warnings = append(t.warnings, msg)
	t.opts.logf("warning: %s", msg)
}

func (t *tree) cleanup() {
	t.runFinally() // a failed restore's (a successful one ran them)
	for _, b := range t.procs {
		b.pidfd.Close() // zombies', and a failed restore's
		b.pidfd = nil
	}
	for _, f := range t.owned {
		f.Close()
	}
	t.owned = nil
	t.once = nil
	if t.ownLock && t.lock != "" {
		netlock.Release(t.lock, -1)
	}
	t.lock = ""
	for _, f := range t.conns {
		f.Close()
	}
	t.conns = nil
	for _, c := range t.deferred {
		c.f.Close()
	}
	t.deferred = nil
}

// kill kills every process built so far (and removes the SysV segments
// made for them).
func (t *tree) kill() {
	defer t.removeSysV()
	for _, b := range t.procs {
		if b.target != 0 {
			b.kill()
		}
	}
	for _, b := range t.procs {
		for _, tid := range b.tasks {
			ptrace.Detach(tid, 0)
		}
		b.target = 0
	}
}

// create makes every process with its old PID and its memory: the root
// forked from the helper, each child forked from its parent once the
// parent's address space is laid out and its pages written, so that the
// pages they shared at the dump are shared again (cow.go). Sessions are
// made as the tree is built (a child inherits its parent's), then process
// groups (see ids.go); zombies then exit with their old status. The helper
// dies at the end: the root's parent becomes init or the nearest child
// subreaper.
func (t *tree) create(pr *image.PagesReader) error {
	files := make([]*os.File, int(t.passBase), int(t.passBase)+len(t.passed))
	files = append(files, t.passed...)
	h, err := startHelper(files)
	if err != nil {
		return err
	}
	defer h.kill()
	if err := checkXState(&t.img.hdr, h.pid.Leader()); err != nil {
		return err
	}
	if t.gadget, err = t.chooseGadget(h.pid); err != nil {
		return err
	}
	ps := t.openPages(pr)
	defer ps.close()
	defer t.sysvDetach()
	hb := &builder{t: t, in: h.in, scratch: helperScratch}
	rootParent, sh, err := t.rootParent(hb)
	var helpers []*idHelper
	if sh != nil {
		helpers = append(helpers, sh)
	}
	defer func() {
		for _, h := range helpers {
			if h.b.target != 0 {
				h.b.kill()
			}
			h.b.pidfd.Close()
		}
	}()
	if err != nil {
		return err
	}
	early := map[*builder]bool{}
	for i, b := range t.procs {
		parent := rootParent
		if i > 0 {
			parent = t.byPID[b.p.PPID]
		}
		if !early[b] {
			if err := parent.clone(b); err != nil {
				return fmt.Errorf("process %d: %w", b.p.PID, err)
			}
		}
		if err := t.fill(ps, i); err != nil {
			return err
		}
		if b.p.SID != b.p.PID {
			continue
		}
		// Children that stayed in the session b left, or lead sessions of
		// their own with descendants that did, are forked first.
		for _, c := range t.procs[i+1:] {
			if c.p.PPID == b.p.PID && c.p.SID != b.p.PID && (c.p.SID != c.p.PID || t.keepsOldSession(c, []sys.PID{b.p.PID, c.p.PID})) {
				if err := b.clone(c); err != nil {
					return fmt.Errorf("process %d: %w", c.p.PID, err)
				}
				early[c] = true
			}
		}
		if _, err := b.call("setsid", unix.SYS_SETSID); err != nil {
			return err
		}
		if err := t.takeCtty(b); err != nil {
			return err
		}
	}
	if err := t.finishPages(ps); err != nil {
		return fmt.Errorf("pages: %w", err)
	}
	t.sysvDetach()
	if err := t.dropShmTemps(); err != nil {
		return err
	}
	if err := t.sysvDone(); err != nil {
		return err
	}
	if err := t.sysvMsgQueues(); err != nil {
		return err
	}
	if helpers, err = t.groups(helpers); err != nil {
		return err
	}
	if err := t.foregrounds(); err != nil {
		return err
	}
	for i := len(helpers) - 1; i >= 0; i-- {
		if err := helpers[i].exit(); err != nil {
			return err
		}
	}
	zombies := map[int32]bool{}
	for _, h := range helpers {
		zombies[int32(h.b.p.PID)] = true
	}
	for _, b := range t.procs {
		if b.p.Zombie {
			zombies[int32(b.p.PID)] = true
			if err := b.becomeZombie(); err != nil {
				return fmt.Errorf("process %d: %w", b.p.PID, err)
			}
		}
	}
	// A traced parent gets the SIGCHLD of a zombie's exit even when it
	// ignores SIGCHLD. It is ours, not the process's: drop it when it
	// shows up during the remaining injections.
	for _, b := range t.procs {
		b.ourChildren = zombies
	}
	return nil
}

// becomeZombie makes a skeleton exit the way the dumped zombie had exited.
// ckpt-redo, its tracer, reaps the trace notification; the zombie stays
// for its real parent to wait for.
func (b *builder) becomeZombie() error {
	name := make([]byte, 16)
	copy(name[:15], b.p.Comm)
	if err := ptrace.WriteMem(b.target, b.scratch, name); err != nil {
		return err
	}
	if _, err := b.call("prctl(PR_SET_NAME)", unix.SYS_PRCTL, unix.PR_SET_NAME, b.scratch); err != nil {
		return err
	}
	ws := unix.WaitStatus(b.p.ExitStatus)
	switch {
	case ws.Signaled():
		if err := b.dieOf(ws); err != nil {
			return err
		}
	default:
		// The injector's wait collects the exit (as the tracer).
		_, err := b.in.Syscall(unix.SYS_EXIT_GROUP, uint64(ws.ExitStatus()))
		if !errors.Is(err, ptrace.ErrExited) {
			return fmt.Errorf("exit_group did not exit: %v", err)
		}
		b.tasks, b.target = nil, 0
		return nil
	}
	for {
		st, err := ptrace.Wait(b.target.Leader())
		if err != nil {
			return err
		}
		if st.Exited() {
			break
		}
		// The stop where the signal is delivered: let it through (a
		// PTRACE_CONT without it would drop it, and the helper run on).
		var sig unix.Signal
		if st.Status.Stopped() && st.Event == 0 && st.Sig() == ws.Signal() {
			sig = ws.Signal()
		}
		if err := ptrace.Cont(b.target.Leader(), sig); err != nil {
			return err
		}
	}
	b.tasks, b.target = nil, 0
	return nil
}

// dieOf sends the skeleton the signal the zombie died of, with its default
// action and unblocked, and no core file left behind unless the zombie
// dumped one (its status says so).
func (b *builder) dieOf(ws unix.WaitStatus) error {
	sig := ws.Signal()
	if !ws.CoreDump() {
		var lim [16]byte // struct rlimit {0, 0}
		if err := ptrace.WriteMem(b.target, b.scratch, lim[:]); err != nil {
			return err
		}
		if _, err := b.call("prlimit64(RLIMIT_CORE 0)", unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CORE, b.scratch, 0); err != nil {
			return err
		}
	}
	if sig != unix.SIGKILL && sig != unix.SIGSTOP {
		var act [32]byte // struct kernel_sigaction: SIG_DFL, no flags, no mask
		if err := ptrace.WriteMem(b.target, b.scratch, act[:]); err != nil {
			return err
		}
		if _, err := b.call("rt_sigaction(SIG_DFL)", unix.SYS_RT_SIGACTION, uint64(sig), b.scratch, 0, 8); err != nil {
			return err
		}
		var set [8]byte
		binary.LittleEndian.PutUint64(set[:], 1<<(uint(sig)-1))
		if err := ptrace.WriteMem(b.target, b.scratch, set[:]); err != nil {
			return err
		}
		if _, err := b.call("rt_sigprocmask(SIG_UNBLOCK)", unix.SYS_RT_SIGPROCMASK, unix.SIG_UNBLOCK, b.scratch, 0, 8); err != nil {
			return err
		}
	}
	return ptrace.Cont(b.target.Leader(), sig)
}

// chooseGadget finds an address for the gadget area that no process of the
// image uses and the skeletons (copies of the helper, pid) do not use
// either.
func (t *tree) chooseGadget(pid sys.PID) (uint64, error) {
	cur, err := proc.ReadMaps(pid)
	if err != nil {
		return 0, err
	}
	free := func(a uint64) bool {
		end := a + gadgetSize
		for _, b := range t.procs {
			for _, v := range b.p.VMAs {
				if a < v.End && v.Start < end {
					return false
				}
			}
		}
		for _, m := range cur {
			if a < m.End && m.Start < end {
				return false
			}
		}
		return true
	}
	for _, c := range []uint64{0x5f0000000000, 0x3f0000000000, 0x1f0000000000, 0x0ff000000000, 0x7f000000, 0x40000000} {
		for a := c; a < c+0x100000000; a += 0x10000000 {
			if free(a) {
				return a, nil
			}
		}
	}
	return 0, fmt.Errorf("no room for the restorer's gadget page")
}

// build rebuilds the tree; on failure the caller kills it.
func (t *tree) build(pr *image.PagesReader) error {
	if err := t.create(pr); err != nil {
		return err
	}
	t.opts.fault(PhaseCreated)
	if err := t.runBeforeBuild(); err != nil {
		return err
	}
	for _, b := range t.live() {
		if err := b.build(); err != nil {
			return fmt.Errorf("process %d: %w", b.p.PID, err)
		}
		if c := t.vforks[b.p.PID]; c != nil {
			if err := b.vfork(c); err != nil {
				return fmt.Errorf("process %d: its vfork() child %d: %w", b.p.PID, c.p.PID, err)
			}
		}
	}
	return t.stopAgain()
}

// fill lays out the i-th process of the image, just forked, and writes
// its pages; a zombie-to-be keeps the memory it was forked with.
func (t *tree) fill(ps *pageStream, i int) error {
	b := t.procs[i]
	if b.p.Zombie {
		return nil
	}
	if err := b.layout(t.gadget); err != nil {
		return fmt.Errorf("process %d: %w", b.p.PID, err)
	}
	if i == 0 {
		t.opts.fault(PhaseMemory)
	}
	// Every registration goes before anything else touches the memory.
	b.filler = b.openFiller()
	err := t.writeUpTo(ps, i)
	b.filler.close()
	b.filler = nil
	if err != nil {
		return fmt.Errorf("pages: %w", err)
	}
	if err := b.dropRest(); err != nil {
		return fmt.Errorf("process %d: %w", b.p.PID, err)
	}
	return nil
}

func (t *tree) live() []*builder {
	var out []*builder
	for _, b := range t.procs {
		if !b.p.Zombie {
			out = append(out, b)
		}
	}
	return out
}

// keepsOldSession tells whether a process of c's subtree is in a session
// none of the leaders on its path from the session leader being made
// (leaders, with c) created: one they left after forking it, which it
// keeps only if they fork it first.
func (t *tree) keepsOldSession(c *builder, leaders []sys.PID) bool {
	for _, x := range t.procs {
		if x.p.PPID != c.p.PID {
			continue
		}
		path := leaders
		if x.p.SID == x.p.PID {
			path = append(slices.Clone(leaders), x.p.PID)
		}
		if !slices.Contains(path, x.p.SID) || t.keepsOldSession(x, path) {
			return true
		}
	}
	return false
}

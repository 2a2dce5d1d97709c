package dump

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// member is one process of the dumped tree.
type member struct {
	pid  sys.PID
	comm string
	fz   *frozen        // nil for a zombie
	p    *image.Process // set for zombies when frozen, for the others by collect
	plan *memPlan
	// vforkChild is, for a parent waiting in vfork() (not seized: fz
	// holds its pidfd only), the child it waits for (vfork.go).
	vforkChild sys.PID
}

// tree is the state shared by the dumpers of one tree's processes: the
// image-wide file table and the data records.
type tree struct {
	opts     *Options
	members  []*member // parents before children
	files    []openFile
	flight   inFlight // files in flight in the UNIX sockets' queues
	fileData []fileData
	nextData int
	ghosts   map[[2]uint64]image.FileRef // dev, ino of a deleted file -> its saved ref
	socks    sockState
	// stopUnreported holds the stopped processes whose parent has not
	// collected their stop yet (asked in the parent, see stopReports).
	stopUnreported map[sys.PID]bool
	// bpf reads the parents waiting in vfork(), loaded for the first.
	bpf *bpftask.Reader
	// kernel is the kernel's BTF every BPF reader of the dump is
	// opened with (decoded once, on the first reader's need).
	kernel *bpftask.Kernel
}

func (t *tree) addData(b []byte) int {
	t.nextData++
	t.fileData = append(t.fileData, fileData{id: t.nextData, data: b})
	return t.nextData
}

// freeze stops the whole tree before anything is read: the root first, then
// the children of each frozen process (a frozen process cannot fork any
// more, so its list of children is final). Children that have exited and
// wait to be reaped are kept as zombies.
func (t *tree) freeze(root sys.PID) error {
	for try := 0; ; try++ {
		err := t.freezeOnce(root)
		if !errors.Is(err, errVforkMoved) || try == 10 {
			return err
		}
	}
}

// freezeOnce is one try of freeze: a vfork() child that calls exec or
// exits before it is frozen lets its parent, taken as waiting for it, run
// again (errVforkMoved, everything released).
func (t *tree) freezeOnce(root sys.PID) error {
	t.members = nil
	queue := []sys.PID{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		st, err := proc.ReadStat(pid, 0)
		if err != nil {
			if pid == root {
				t.release()
				return fmt.Errorf("%w: %v", ErrNoProcess, err)
			}
			continue // exited and reaped meanwhile
		}
		m := &member{pid: pid, comm: st.Comm}
		dead := st.State == 'Z' && leaderExited(pid) // a zombie leader, other threads running
		if st.State == 'Z' && pid != root && !dead {
			m.p = zombie(st)
			t.members = append(t.members, m)
			continue
		}
		kid, err := t.sharedVM(pid, st, pid == root)
		if err != nil {
			t.release()
			return err
		}
		if kid != 0 {
			// Waiting in vfork(): it cannot fork meanwhile, its list of
			// children is final.
			if m.fz, err = vforkFrozen(pid); err != nil {
				t.release()
				return err
			}
			m.vforkChild = kid
			t.members = append(t.members, m)
			kids, err := proc.Children(pid)
			if err != nil {
				t.release()
				return fmt.Errorf("process %d: list children: %w", pid, err)
			}
			queue = append(queue, kids...)
			continue
		}
		if m.fz, err = freeze(pid, dead); err != nil {
			// A child that exits meanwhile: seizing a zombie says EPERM
			// (ptrace_attach refuses a task with an exit state), a
			// reaped one ESRCH.
			if pid != root && (errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EPERM)) {
				st2, err2 := proc.ReadStat(pid, 0)
				switch {
				case err2 == nil && st2.State == 'Z' && !leaderExited(pid):
					m.p = zombie(st2)
					t.members = append(t.members, m)
					continue
				case err2 != nil || errors.Is(err, unix.ESRCH):
					continue // reaped meanwhile
				}
			}
			t.release()
			return fmt.Errorf("process %d (%s): %w", pid, st.Comm, err)
		}
		t.members = append(t.members, m)
		kids, err := proc.Children(pid)
		if err != nil {
			t.release()
			return fmt.Errorf("process %d: list children: %w", pid, err)
		}
		queue = append(queue, kids...)
	}
	if err := t.checkVforks(); err != nil {
		t.release()
		return err
	}
	return nil
}

// vforkWait bounds the wait for a vfork() child to call exec or exit.
const vforkWait = 250 * time.Millisecond

// sharedVM looks for children of a process that share its memory (not
// threads of it): a vfork() child, which runs in the parent's memory
// until it calls exec or exits while the parent waits in the kernel and
// cannot even be stopped, or a clone(CLONE_VM) child. A vfork() child
// usually calls exec at once: while it runs, the dump waits for that up
// to vforkWait.
// A child still sharing then is returned if the process waits in vfork()
// for it (vforkChild: the tree is dumped with it), else refused before
// anything of the process is seized. The root itself sharing its
// parent's memory is refused.
func (t *tree) sharedVM(pid sys.PID, st *proc.Stat, root bool) (sys.PID, error) {
	if root && st.PPID > 0 {
		if same, _ := sys.SameVM(pid, st.PPID); same {
			return 0, fmt.Errorf("process %d (%s) shares the memory of its parent %d (a vfork() child before it calls exec or exits, or clone(CLONE_VM)): cannot be dumped without its parent (dump the parent): %w",
				pid, st.Comm, st.PPID, ErrUnsupported)
		}
	}
	deadline := time.Now().Add(vforkWait)
	for {
		kids, err := vmSharingChildren(pid)
		if err != nil || len(kids) == 0 {
			return 0, nil
		}
		if time.Now().After(deadline) || !busy(kids) {
			return t.vforkChild(pid, st, kids)
		}
		time.Sleep(time.Millisecond)
	}
}

// busy tells whether one of the processes is running or in an
// uninterruptible wait (on its way to exec, reading the program), not
// sleeping, stopped or gone: a child sleeping before its exec waits for
// something, and the dump does not wait for it.
func busy(pids []sys.PID) bool {
	for _, pid := range pids {
		if st, err := proc.ReadStat(pid, 0); err == nil && (st.State == 'R' || st.State == 'D') {
			return true
		}
	}
	return false
}

// vmSharingChildren lists the children of pid sharing its memory.
func vmSharingChildren(pid sys.PID) ([]sys.PID, error) {
	kids, err := proc.Children(pid)
	if err != nil {
		return nil, err // gone meanwhile: freeze says so
	}
	var out []sys.PID
	for _, kid := range kids {
		if same, _ := sys.SameVM(pid, kid); same {
			out = append(out, kid)
		}
	}
	return out, nil
}

func zombie(st *proc.Stat) *image.Process {
	return &image.Process{PID: st.PID, PPID: st.PPID, PGID: st.PGRP, SID: st.Session, Comm: st.Comm,
		Zombie: true, ExitStatus: st.ExitCode}
}

// release lets every process go on as before.
func (t *tree) release() {
	t.closeReader()
	for i := len(t.members) - 1; i >= 0; i-- {
		if fz := t.members[i].fz; fz != nil {
			fz.release()
		}
	}
}

// kill kills every frozen process; none runs again.
func (t *tree) kill() {
	deadline := time.Now().Add(10 * time.Second)
	t.killVforkParents(deadline)
	for _, m := range t.members {
		if m.fz != nil {
			m.fz.kill()
		}
	}
	for _, m := range t.members {
		if m.fz != nil {
			m.fz.waitDead(deadline)
		}
	}
}

// checkIDs checks that every session and process group of the tree can be
// rebuilt: its leader is a process of the tree, or it is gone (a helper
// process then takes its PID at restore). A leader alive outside the tree
// is refused by name, unless opts.ShellJob: those IDs are returned, and the
// restore puts their members into ckpt-redo's own session and group. Each
// process must be in its own session or its parent's: a session is only
// inherited over fork.
func (t *tree) checkIDs() (external []sys.PID, err error) {
	ids := map[sys.PID]*proc.Stat{}
	for _, m := range t.members {
		st, err := proc.ReadStat(m.pid, 0)
		if err != nil {
			return nil, fmt.Errorf("process %d: %w", m.pid, err)
		}
		ids[m.pid] = st
	}
	ext := map[sys.PID]bool{}
	for i, m := range t.members {
		st := ids[m.pid]
		for _, id := range []struct {
			what string
			id   sys.PID
			of   func(*proc.Stat) sys.PID
		}{
			{"session", st.Session, func(s *proc.Stat) sys.PID { return s.Session }},
			{"process group", st.PGRP, func(s *proc.Stat) sys.PID { return s.PGRP }},
		} {
			if lst, in := ids[id.id]; in {
				if id.of(lst) != id.id {
					return nil, fmt.Errorf("process %d: %s %d: its leader left it and its PID %d is now a process of the tree: %w",
						m.pid, id.what, id.id, id.id, ErrUnsupported)
				}
				continue
			}
			lst, err := proc.ReadStat(id.id, 0)
			if err != nil || id.of(lst) != id.id {
				continue // the leader is gone: recreated at restore
			}
			if !t.opts.ShellJob {
				return nil, fmt.Errorf("process %d: %s %d is led by process %d (%s) outside the dump; use --shell-job: %w",
					m.pid, id.what, id.id, id.id, lst.Comm, ErrUnsupported)
			}
			ext[id.id] = true
		}
		if i == 0 || st.Session == m.pid {
			continue
		}
		parent, ok := ids[st.PPID]
		if !ok || parent.Session == st.Session {
			continue
		}
		// Forked before its parent called setsid: it keeps the session
		// its parent had then, its grandparent's, or one from further up
		// if the grandparent too had called setsid after forking the
		// parent, and so on: every ancestor up to one in that session
		// leads a session of its own.
		if keptSession(ids, parent, st.Session) {
			continue
		}
		return nil, fmt.Errorf("process %d: session %d is neither its own, nor its parent's (%d, process %d), nor one its ancestors left: cannot be rebuilt: %w",
			m.pid, st.Session, parent.Session, st.PPID, ErrUnsupported)
	}
	if err := t.checkOutsideMembers(ids, ext); err != nil {
		return nil, err
	}
	for id := range ext {
		external = append(external, id)
	}
	slices.Sort(external)
	return external, nil
}

// checkOutsideMembers refuses a tree whose sessions or process groups
// have members outside the dump, other than the external ones
// (--shell-job): a session or group ID pins its PID while any process is
// in it, so the restore could not give that PID to the process (or to the
// helper standing in for a leader that is gone) again. Such members are
// typically the children of a zombie session leader, which were given to
// a subreaper outside the tree.
func (t *tree) checkOutsideMembers(ids map[sys.PID]*proc.Stat, ext map[sys.PID]bool) error {
	made := map[sys.PID]string{} // ID -> what the restore makes with that PID
	for pid, st := range ids {
		made[pid] = "process"
		for _, id := range [2]sys.PID{st.Session, st.PGRP} {
			if _, ok := made[id]; !ok && !ext[id] {
				made[id] = "session or process group"
			}
		}
	}
	// kthreadd's children are left out: in session 0 and group 0, or
	// (a helper the kernel started) in a session of their own, whose
	// leader checkIDs has seen if it is one of the tree's. Not when the
	// tree itself is in session or group 0.
	var skip map[sys.PID]bool
	if _, zero := made[0]; !zero {
		var err error
		if skip, err = proc.KthreaddChildren(); err != nil {
			return err
		}
	}
	return proc.ScanGroupsExcept(skip, func(g proc.Groups) error {
		if ids[g.PID] != nil {
			return nil
		}
		for _, id := range [2]sys.PID{g.Session, g.PGRP} {
			if _, ok := made[id]; !ok || ext[id] {
				continue
			}
			what := "session"
			if id != g.Session {
				what = "process group"
			}
			owner := id // the process of the dump whose session or group it is
			if _, in := ids[id]; !in {
				for mpid, mst := range ids {
					if mst.Session == id || mst.PGRP == id {
						owner = mpid
						break
					}
				}
			}
			return fmt.Errorf("process %d: its %s %d also has process %d (%s), outside the dump, which keeps PID %d in use: the restore could not take it again: %w",
				owner, what, id, g.PID, g.Comm, id, ErrUnsupported)
		}
		return nil
	})
}

// keptSession tells whether a child of parent can be in session sid
// because it was forked before parent, and the session leaders above it,
// called setsid: going up from parent, every ancestor leads a session of
// its own until one is in sid.
func keptSession(ids map[sys.PID]*proc.Stat, parent *proc.Stat, sid sys.PID) bool {
	for a := parent; a != nil; a = ids[a.PPID] {
		if a.Session == sid {
			return true
		}
		if a.Session != a.PID {
			return false // it cannot have left sid after forking the chain
		}
	}
	return false
}

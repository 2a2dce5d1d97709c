package restore

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// Sessions and process groups are rebuilt exactly. A session is only
// inherited over fork or created by setsid, and a process can join only a
// process group of its own session, so the order is:
//
//  1. the root's session: setsid in the root if it led it; if its leader
//     is gone, a helper process with the leader's PID calls setsid and
//     forks the root;
//  2. every other process inherits its parent's session as it is forked,
//     and a session leader calls setsid right after its fork, or after
//     forking the children that stayed in the session it left;
//  3. process groups, leaders first: a leader in the tree (alive or to be
//     a zombie) calls setpgid(0, 0); a group whose leader is gone gets a
//     helper with the leader's PID, forked from one of its members, that
//     calls setpgid(0, 0);
//  4. the members join with setpgid(0, PGID);
//  5. the helpers exit and their parents reap them; the groups and the
//     session live on through their members, as they did at the dump.
//
// Sessions and groups led by processes outside the dump (Header.ExternalIDs,
// accepted at dump with --shell-job) are replaced by ckpt-redo's own.

// idHelper is a short-lived process holding the PID of a gone leader.
type idHelper struct {
	b      *builder
	parent *builder
}

// spawnIDHelper forks, from parent, a helper process with the given PID.
func (t *tree) spawnIDHelper(parent *builder, pid sys.PID) (*idHelper, error) {
	h := &builder{t: t, opts: t.opts, p: &image.Process{PID: pid, Comm: "ckpt-id-helper"}}
	if err := parent.clone(h); err != nil {
		return nil, fmt.Errorf("helper for the gone leader %d: %w", pid, err)
	}
	return &idHelper{b: h, parent: parent}, nil
}

// exit ends the helper and has its parent reap it.
func (h *idHelper) exit() error {
	_, err := h.b.in.Syscall(unix.SYS_EXIT_GROUP, 0)
	if !errors.Is(err, ptrace.ErrExited) {
		return fmt.Errorf("helper %d: exit_group did not exit: %v", h.b.target, err)
	}
	pid := h.b.target
	h.b.target, h.b.tasks = 0, nil
	ret, err := h.parent.call("wait4", unix.SYS_WAIT4, uint64(pid), 0, unix.WALL, 0)
	if err != nil {
		return fmt.Errorf("reap helper %d: %w", pid, err)
	}
	if sys.PID(ret) != pid {
		return fmt.Errorf("reap helper %d: wait4 returned %d", pid, ret)
	}
	// The parent's SIGCHLD for the helper is ours, not the process's.
	h.parent.dropChildSignal(pid)
	return nil
}

// dropChildSignal forgets the SIGCHLD the injector caught for child pid.
func (b *builder) dropChildSignal(pid sys.PID) {
	b.in.Signals = slices.DeleteFunc(b.in.Signals, func(s ptrace.Signal) bool {
		return s.Sig == unix.SIGCHLD && childOf(s) == int32(pid)
	})
}

// childOf returns si_pid of a SIGCHLD's siginfo, 0 if it is too short.
func childOf(s ptrace.Signal) int32 {
	if len(s.Info) < 20 {
		return 0
	}
	return int32(uint32(s.Info[16]) | uint32(s.Info[17])<<8 | uint32(s.Info[18])<<16 | uint32(s.Info[19])<<24)
}

// external tells whether the session or group id was led from outside
// the dump.
func (t *tree) external(id sys.PID) bool { return slices.Contains(t.img.hdr.ExternalIDs, id) }

// goneLeaders lists the sessions and process groups of the tree whose
// leader had gone at the dump: a helper takes each of their PIDs, which
// must be free as the tree's own are.
func (t *tree) goneLeaders() []sys.PID {
	var ids []sys.PID
	for _, b := range t.procs {
		for _, id := range []sys.PID{b.p.SID, b.p.PGID} {
			if _, in := t.byPID[id]; !in && !t.external(id) && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// rootParent returns the process to fork the root from: the restore
// helper, or a helper holding the PID of the root's gone session leader,
// which is made to lead a new session first.
func (t *tree) rootParent(hb *builder) (*builder, *idHelper, error) {
	root := t.procs[0].p
	if root.SID == root.PID || t.external(root.SID) {
		return hb, nil, nil
	}
	h, err := t.spawnIDHelper(hb, root.SID)
	if err != nil {
		return nil, nil, err
	}
	if _, err := h.b.call("setsid", unix.SYS_SETSID); err != nil {
		return nil, h, err
	}
	return h.b, h, nil
}

// groups puts every process into its process group; helpers are the ID
// helpers made so far (the root's session's, which leads its own group).
// It returns them with the group helpers it made.
func (t *tree) groups(helpers []*idHelper) ([]*idHelper, error) {
	helperOf := func(id sys.PID) *idHelper {
		for _, h := range helpers {
			if h.b.p.PID == id {
				return h
			}
		}
		return nil
	}
	// Leaders first.
	for _, b := range t.procs {
		g := b.p.PGID
		if t.external(g) || helperOf(g) != nil {
			continue
		}
		if l, ok := t.byPID[g]; ok {
			if l != b || l.p.SID == l.p.PID {
				continue // the leader does it; a session leader leads its group already
			}
			if _, err := b.call("setpgid", unix.SYS_SETPGID, 0, 0); err != nil {
				return helpers, fmt.Errorf("process %d: %w", b.p.PID, err)
			}
			continue
		}
		// The leader is gone: a helper forked from this first member
		// (in the group's session) takes its PID.
		h, err := t.spawnIDHelper(b, g)
		if err != nil {
			return helpers, fmt.Errorf("process %d: %w", b.p.PID, err)
		}
		helpers = append(helpers, h)
		if _, err := h.b.call("setpgid", unix.SYS_SETPGID, 0, 0); err != nil {
			return helpers, fmt.Errorf("process %d: group helper: %w", b.p.PID, err)
		}
	}
	sid, err := unix.Getsid(0)
	if err != nil {
		return helpers, err
	}
	ownSID, ownPGID := sys.PID(sid), sys.PID(unix.Getpgrp())
	for _, b := range t.procs {
		st, err := proc.ReadStat(b.target, 0)
		if err != nil {
			return helpers, fmt.Errorf("process %d: %w", b.p.PID, err)
		}
		wantSID, wantPGID := b.p.SID, b.p.PGID
		if t.external(wantSID) {
			wantSID = ownSID
		}
		if t.external(wantPGID) {
			wantPGID = ownPGID
		}
		if st.PGRP != wantPGID {
			if _, err := b.call("setpgid", unix.SYS_SETPGID, 0, uint64(wantPGID)); err != nil {
				return helpers, fmt.Errorf("process %d: join process group %d: %w", b.p.PID, wantPGID, err)
			}
			if st, err = proc.ReadStat(b.target, 0); err != nil {
				return helpers, fmt.Errorf("process %d: %w", b.p.PID, err)
			}
		}
		if st.Session != wantSID || st.PGRP != wantPGID {
			return helpers, fmt.Errorf("process %d: session %d and process group %d, want %d and %d", b.p.PID, st.Session, st.PGRP, wantSID, wantPGID)
		}
		if wantSID != b.p.SID || wantPGID != b.p.PGID {
			t.opts.logf("process %d: session %d and process group %d were led from outside the dump: now ckpt-redo's, %d and %d",
				b.p.PID, b.p.SID, b.p.PGID, wantSID, wantPGID)
		}
	}
	return helpers, nil
}

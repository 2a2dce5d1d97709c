package restore

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/machine"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// pass adds a file to the helper's fd table and returns its fd number there.
func (t *tree) pass(f *os.File, owned bool) sys.TargetFD {
	if owned {
		t.owned = append(t.owned, f)
	}
	t.passed = append(t.passed, f)
	return t.passBase + sys.TargetFD(len(t.passed)-1)
}

// prepareFiles opens, in ckpt-redo, every file the processes will have:
// their open file descriptions (each once, by its kind's handler in
// pkg/fdkind, with its flags, position and signal), the files behind
// their mappings, their executables and shared memory. They reach the new
// processes through the helper's fd table, which every process of the
// tree inherits. Descriptions that only the process itself can open are
// kept for builder.fds.
func (t *tree) prepareFiles() error {
	// The passed files sit above every fd number a process uses: its
	// fds, and the numbers its epoll items were registered under (an
	// item whose fd was closed since gets its file back there for a
	// moment, which must not be a passed file).
	maxFD := sys.TargetFD(2)
	for _, b := range t.procs {
		for _, e := range b.p.FDs {
			maxFD = max(maxFD, e.FD)
		}
		for _, f := range b.p.Files {
			if f.Kind == image.FileEpoll && f.Event != nil {
				for _, it := range f.Event.Items {
					maxFD = max(maxFD, it.FD)
				}
			}
		}
	}
	t.passBase = maxFD + 1
	t.fileFD = map[int]sys.TargetFD{}
	t.inTarget = map[int]func(fdkind.Target, sys.TargetFD, bool) error{}
	used := map[int]fdkind.Where{} // file ID -> the first fd using it, for messages
	for _, b := range t.procs {
		for _, e := range b.p.FDs {
			if _, ok := used[e.File]; !ok {
				used[e.File] = fdkind.Where{PID: b.p.PID, FD: e.FD}
			}
		}
	}
	// --inherit-fd N: the root's fd N, and every fd sharing its file.
	root := t.procs[0].p
	for _, e := range root.FDs {
		if f, ok := t.opts.Inherit[e.FD]; ok {
			t.fileFD[e.File] = t.pass(f, false)
			t.foreign[e.File] = true
		}
	}
	ids := make([]int, 0, len(t.files))
	for id := range t.files {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	env := fileEnv{t}
	for _, id := range ids {
		f := t.files[id]
		at, isUsed := used[id]
		if _, done := t.fileFD[id]; done || !isUsed {
			continue
		}
		if err := t.openFile(env, f, at); err != nil {
			return fmt.Errorf("%v (%s): %w", at, f.Kind, err)
		}
	}
	for _, b := range t.procs {
		if b.p.Zombie {
			continue
		}
		if err := b.prepareMapped(); err != nil {
			return fmt.Errorf("process %d: %w", b.p.PID, err)
		}
		if err := b.prepareCwd(env); err != nil {
			return fmt.Errorf("process %d: %w", b.p.PID, err)
		}
	}
	return t.prepareCtty()
}

// openFile rebuilds one open file description with its kind's handler
// and gives it what every description has (fdkind.Settle).
func (t *tree) openFile(env fileEnv, f *image.File, at fdkind.Where) error {
	k, err := fdkind.Lookup(f.Kind)
	if err != nil {
		return err
	}
	if k.Open == nil {
		return fmt.Errorf("kind %q cannot be restored: %w", f.Kind, image.ErrCorrupt)
	}
	d, err := k.Open(env, f, at)
	if err != nil {
		return err
	}
	if d.File == nil {
		if d.InTarget == nil {
			return fmt.Errorf("kind %q opened nothing", f.Kind)
		}
		t.inTarget[f.ID] = d.InTarget
		return nil
	}
	t.fileFD[f.ID] = t.pass(d.File, true)
	if d.Foreign {
		t.foreign[f.ID] = true
		return nil
	}
	if err := fdkind.Settle(f, d.File); err != nil {
		return err
	}
	return fdkind.TakeLocks(f, d.File, t.takesFlocks)
}

// takesFlocks tells whether pid is a process of the dump that gets its fd
// table back (not a zombie): it takes its flock locks itself
// (fdkind.TakeFlocks).
func (t *tree) takesFlocks(pid sys.PID) bool {
	b, ok := t.byPID[pid]
	return ok && !b.p.Zombie
}

// setOwners gives the restored descriptions their F_SETOWN owners, once
// every process of the tree exists.
func (t *tree) setOwners() error {
	for id, fd := range t.fileFD {
		f := t.files[id]
		if f == nil || f.Owner == nil || t.foreign[id] {
			continue
		}
		if err := fdkind.SetOwner(f, t.passed[int(fd-t.passBase)]); err != nil {
			return fmt.Errorf("file %d (%s): %w", id, fdkind.Show(f), err)
		}
	}
	return nil
}

// prepareMapped opens the files behind a process's mappings and its
// executable.
func (b *builder) prepareMapped() error {
	p, t := b.p, b.t
	b.mapFD = map[int]sys.TargetFD{}
	for i, ref := range p.Mapped {
		write := false
		for _, v := range p.VMAs {
			if v.File == i && v.Shared && v.Prot&unix.PROT_WRITE != 0 {
				write = true
			}
		}
		f, err := t.openRef(&ref, write, true)
		if err != nil {
			return fmt.Errorf("mapped file %s: %w", ref.Path, err)
		}
		b.mapFD[i] = t.pass(f, true)
		if ref.Path == p.Exe && !ref.Deleted {
			b.exeFD = b.mapFD[i]
		}
	}
	if b.exeFD == 0 {
		f, err := os.Open(p.Exe)
		if err != nil {
			b.warnf("executable %s: %v; /proc/%d/exe will not point to it", p.Exe, err, p.PID)
			b.exeFD = -1
		} else {
			b.exeFD = t.pass(f, true)
		}
	}
	return nil
}

// repairing is a restored connection still in repair mode.
type repairing struct {
	f     *os.File
	s     *image.Socket
	sendQ []byte
}

// runFinally runs the socket kinds' last steps, last registered first,
// once; the first error is returned.
func (t *tree) runFinally() error {
	var first error
	for i := len(t.finally) - 1; i >= 0; i-- {
		if err := t.finally[i](); err != nil && first == nil {
			first = err
		}
	}
	t.finally = nil
	return first
}

// resumeSockets takes every restored connection out of repair mode, once
// all are built (and the socket kinds' last steps ran); the network lock
// stays until Release.
func (t *tree) resumeSockets() error {
	if err := t.runFinally(); err != nil {
		return err
	}
	// A connection in SYN_SENT connects when it resumes: its SYN must
	// find the lock open to its own packets, or it is dropped and sent
	// again only a second later (the peer's answer is held until the
	// release, like the rest of what the peers send). The others resume
	// first, while the lock's commit may still be on its way.
	// The connections of a member of a group leave repair mode at
	// Release, when the lock lets their packets out (Options.Group):
	// copies of their sockets wait there.
	resume := func(r repairing) error {
		// A copy, so that a restore discarded before its release can
		// silence the connection again (see Restored.Kill).
		d, err := dupFile(r.f)
		if err != nil {
			return err
		}
		if t.opts.Group {
			r.f = d
			t.deferred = append(t.deferred, r)
			return nil
		}
		t.conns = append(t.conns, d)
		return resumeRepairing(r)
	}
	var synSent []repairing
	for _, r := range t.repairs {
		if r.s.State == sockets.StateSynSent {
			synSent = append(synSent, r)
			continue
		}
		if err := resume(r); err != nil {
			return err
		}
	}
	if len(synSent) > 0 && t.outgoing != nil {
		<-t.outgoing
	}
	for _, r := range synSent {
		if err := resume(r); err != nil {
			return err
		}
	}
	t.repairs = nil
	return nil
}

// resumeRepairing takes a restored connection out of repair mode.
func resumeRepairing(r repairing) error {
	if err := sockets.ResumeSocket(int(r.f.Fd()), r.s, r.sendQ); err != nil {
		return fmt.Errorf("socket %s-%s: %w", r.s.Local, r.s.Remote, err)
	}
	return nil
}

func (t *tree) openStdio() (*os.File, error) {
	f, err := os.OpenFile(t.opts.Stdio, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--stdio: %w", err)
	}
	return f, nil
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// openRef opens a file the processes map (see fdkind.OpenRef).
func (t *tree) openRef(ref *image.FileRef, write, strict bool) (*os.File, error) {
	fl := unix.O_RDONLY
	if write {
		fl = unix.O_RDWR
	}
	return fdkind.OpenRef(fileEnv{t}, ref, fl, strict)
}

// takeLock makes sure a network lock covers the connections and listeners
// about to be restored before any of them exists, when the dump's lock is
// not in this network namespace (the image was moved to another node, or
// the dump let the processes run): a connection leaving repair mode sends a
// window probe, and a peer not restored yet would answer it with a RST.
// The lock is lifted by Release, once the caller (a group restore: once
// every member) lets the processes run.
func (t *tree) takeLock() error {
	var conns []netlock.Conn
	for _, f := range t.files {
		s := f.Socket
		if s == nil || s.Type != unix.SOCK_STREAM || (s.Family != unix.AF_INET && s.Family != unix.AF_INET6) {
			continue
		}
		c := *s
		if t.opts.Rules != nil {
			if err := fdkind.RewriteEndpoints(t.opts.Rules, &c); err != nil {
				return err
			}
		}
		local, err := netip.ParseAddrPort(c.Local)
		if err != nil {
			continue
		}
		switch {
		case c.TCP != nil:
			remote, err := netip.ParseAddrPort(c.Remote)
			if err != nil {
				return fmt.Errorf("socket address %q: %w", c.Remote, image.ErrCorrupt)
			}
			conns = append(conns, netlock.Conn{Local: local, Remote: remote})
		case c.State == sockets.StateListen:
			conns = append(conns, netlock.Conn{Local: local})
		}
	}
	if len(conns) == 0 {
		if t.opts.TCPClose {
			return t.adoptDumpLock()
		}
		return nil
	}
	name := strings.TrimPrefix(t.img.hdr.NetLock, netlock.TablePrefix)
	if name == "" {
		name = fmt.Sprintf("redo-%d", os.Getpid())
	}
	tables, err := netlock.Tables()
	if err != nil {
		return err
	}
	if slices.Contains(tables, netlock.TablePrefix+name) {
		t.lock = netlock.TablePrefix + name
		return nil
	}
	// Held by a goroutine of ours: the lock lives as long as this restore.
	l, err := netlock.TakeHeld(name, conns, nil, "")
	if err != nil {
		return err
	}
	if l.HoldErr != nil {
		t.warnf("network lock %s drops the peers' packets instead of holding them: %v", l.Table, l.HoldErr)
	}
	t.lock, t.ownLock = l.Table, true
	return nil
}

// SYNsDropped implements fdkind.SocketRestoreEnv: the tree's lock
// (netlock) drops the packets marked sockets.DropMark, for as long as it
// lives.
func (e fileEnv) SYNsDropped() bool { return e.t.lock != "" }

// fileEnv is what the fd kinds get from the restore of a tree.
type fileEnv struct{ t *tree }

// Data implements fdkind.RestoreEnv.
func (e fileEnv) Data(id int) ([]byte, error) {
	b, ok := e.t.img.data[id]
	if !ok {
		return nil, fmt.Errorf("data record %d missing: %w", id, image.ErrCorrupt)
	}
	return b, nil
}

// Once implements fdkind.RestoreEnv.
func (e fileEnv) Once(key any, build func() (any, error)) (any, error) {
	if v, ok := e.t.once[key]; ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return nil, err
	}
	if e.t.once == nil {
		e.t.once = map[any]any{}
	}
	e.t.once[key] = v
	return v, nil
}

// Keep implements fdkind.RestoreEnv.
func (e fileEnv) Keep(f *os.File) { e.t.owned = append(e.t.owned, f) }

// InDump implements fdkind.RestoreEnv.
func (e fileEnv) InDump(pid sys.PID) bool {
	if _, ok := e.t.byPID[pid]; ok {
		return true
	}
	for _, b := range e.t.procs {
		for _, th := range b.p.Threads {
			if th.TID == sys.TID(pid) {
				return true
			}
		}
	}
	return false
}

// SameBoot implements fdkind.RestoreEnv.
func (e fileEnv) SameBoot() bool { return machine.SameBoot(e.t.img.hdr.BootID) }

// ShellJob implements fdkind.RestoreEnv.
func (e fileEnv) ShellJob() bool { return e.t.opts.ShellJob }

// Stdio implements fdkind.RestoreEnv.
func (e fileEnv) Stdio() (*os.File, bool, error) {
	if e.t.opts.Stdio == "" {
		return nil, false, nil
	}
	f, err := e.t.openStdio()
	return f, true, err
}

// Sockets implements fdkind.RestoreEnv.
func (e fileEnv) Sockets() fdkind.SocketRestoreEnv { return e }

// Rules implements fdkind.SocketRestoreEnv.
func (e fileEnv) Rules() *rewrite.Rules { return e.t.opts.Rules }

// Peer implements fdkind.SocketRestoreEnv.
func (e fileEnv) Peer(ino uint32) *image.File {
	for _, f := range e.t.files {
		if f.Socket != nil && f.Socket.Family == unix.AF_UNIX && f.Socket.Ino == ino {
			return f
		}
	}
	return nil
}

// Named implements fdkind.SocketRestoreEnv.
func (e fileEnv) Named(name string) []*image.File {
	var out []*image.File
	for _, f := range e.t.files {
		if f.Socket != nil && f.Socket.Family == unix.AF_UNIX && f.Socket.Local == name {
			out = append(out, f)
		}
	}
	return out
}

// Repairing implements fdkind.SocketRestoreEnv.
func (e fileEnv) Repairing(f *os.File, s *image.Socket, sendQ []byte) {
	e.t.repairs = append(e.t.repairs, repairing{f: f, s: s, sendQ: sendQ})
}

// Finally implements fdkind.SocketRestoreEnv.
func (e fileEnv) Finally(fn func() error) { e.t.finally = append(e.t.finally, fn) }

// BeforeBuild implements fdkind.RestoreEnv: fn runs in build, once every
// process exists and before any is built.
func (e fileEnv) BeforeBuild(fn func(target func(pid sys.PID) (fdkind.Target, bool)) error) {
	e.t.beforeBuild = append(e.t.beforeBuild, fn)
}

// runBeforeBuild runs the kinds' BeforeBuild steps, with the live
// processes of the tree as targets.
func (t *tree) runBeforeBuild() error {
	target := func(pid sys.PID) (fdkind.Target, bool) {
		b, ok := t.byPID[pid]
		if !ok || b.p.Zombie {
			return nil, false
		}
		return target{b}, true
	}
	// Steps may ask for more steps: they run after those asked before.
	for i := 0; i < len(t.beforeBuild); i++ {
		if err := t.beforeBuild[i](target); err != nil {
			return err
		}
	}
	return nil
}

// File implements fdkind.RestoreEnv: ckpt-redo's copy of the description
// id, opened now if no fd uses it (a file in flight).
func (e fileEnv) File(id int) (*os.File, error) {
	t := e.t
	if _, ok := t.fileFD[id]; !ok {
		f := t.files[id]
		if f == nil {
			return nil, fmt.Errorf("file %d is not in the image: %w", id, image.ErrCorrupt)
		}
		if t.inTarget[id] != nil {
			return nil, fmt.Errorf("file %d (%s) is opened by its process only", id, fdkind.Show(f))
		}
		if err := t.openFile(e, f, fdkind.Where{}); err != nil {
			return nil, fmt.Errorf("file %d (%s) in flight: %w", id, f.Kind, err)
		}
		if _, ok := t.fileFD[id]; !ok {
			return nil, fmt.Errorf("file %d (%s) in flight is opened by its process only", id, fdkind.Show(f))
		}
	}
	return t.passed[int(t.fileFD[id]-t.passBase)], nil
}

package restore

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// openFlagsKept are the status flags reopened files get back.
const openFlagsKept = unix.O_ACCMODE | unix.O_APPEND | unix.O_NONBLOCK | unix.O_DSYNC | unix.O_SYNC |
	unix.O_DIRECT | unix.O_NOATIME | unix.O_LARGEFILE | unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW

// pass adds a file to the helper's fd table and returns its fd number there.
func (t *tree) pass(f *os.File, owned bool) int {
	if owned {
		t.owned = append(t.owned, f)
	}
	t.passed = append(t.passed, f)
	return t.passBase + len(t.passed) - 1
}

// prepareFiles opens, in ckpt-redo, every file the processes will have:
// their open file descriptions (with their flags and offsets), the files
// behind their mappings, their executables and shared memory. They reach
// the new processes through the helper's fd table, which every process of
// the tree inherits.
func (t *tree) prepareFiles() error {
	maxFD := 2
	for _, b := range t.procs {
		for _, e := range b.p.FDs {
			maxFD = max(maxFD, e.FD)
		}
	}
	t.passBase = maxFD + 1
	t.fileFD = map[int]int{}
	used := map[int]int{} // file ID -> a target fd using it, for messages
	for _, b := range t.procs {
		for _, e := range b.p.FDs {
			if _, ok := used[e.File]; !ok {
				used[e.File] = e.FD
			}
		}
	}
	// --inherit-fd N: the root's fd N, and every fd sharing its file.
	root := t.procs[0].p
	for _, e := range root.FDs {
		if f, ok := t.opts.Inherit[e.FD]; ok {
			t.fileFD[e.File] = t.pass(f, false)
		}
	}
	pipes := map[uint64][2]*os.File{}
	ids := make([]int, 0, len(t.files))
	for id := range t.files {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		f := t.files[id]
		tfd, isUsed := used[id]
		if _, done := t.fileFD[id]; done || !isUsed {
			continue
		}
		if t.ownProc(f) {
			// Opened by the process itself once it exists (see fds).
			continue
		}
		of, err := t.openFile(f, tfd, pipes)
		if err != nil {
			return fmt.Errorf("fd %d: %w", tfd, err)
		}
		t.fileFD[id] = t.pass(of, true)
	}
	for _, b := range t.procs {
		if b.p.Zombie {
			continue
		}
		if err := b.prepareMapped(); err != nil {
			return fmt.Errorf("process %d: %w", b.p.PID, err)
		}
	}
	return nil
}

// prepareMapped opens the files behind a process's mappings and its
// executable.
func (b *builder) prepareMapped() error {
	p, t := b.p, b.t
	b.mapFD = map[int]int{}
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

func (t *tree) openFile(f *image.File, tfd int, pipes map[uint64][2]*os.File) (*os.File, error) {
	switch f.Kind {
	case image.FileRegular, image.FileDir, image.FileChar:
		of, err := t.openRef(&f.Ref, false, false, f.Flags)
		if err != nil {
			return nil, err
		}
		if f.Kind == image.FileRegular && f.Pos != 0 {
			if _, err := of.Seek(f.Pos, 0); err != nil {
				of.Close()
				return nil, fmt.Errorf("%s: seek to %d: %w", f.Ref.Path, f.Pos, err)
			}
		}
		return of, nil
	case image.FileTTY:
		if t.opts.ShellJob {
			for _, our := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
				if _, err := unix.IoctlGetTermios(int(our.Fd()), unix.TCGETS); err == nil {
					return dupFile(our)
				}
			}
			return nil, fmt.Errorf("terminal %s: --shell-job given but ckpt-redo runs on no terminal: %w", f.Ref.Path, ErrExternal)
		}
		if t.opts.Stdio != "" && tfd <= 2 {
			return t.openStdio()
		}
		return nil, fmt.Errorf("terminal %s: the process ran on a terminal; pass --shell-job to attach it to this one, "+
			"or --stdio FILE to replace its standard fds: %w", f.Ref.Path, ErrExternal)
	case image.FilePipe:
		if f.Pipe.External {
			if t.opts.Stdio != "" && tfd <= 2 {
				return t.openStdio()
			}
			return nil, fmt.Errorf("pipe:[%d] whose other end is outside the dump; pass --inherit-fd %d to give it this "+
				"ckpt-redo's fd %d, or --stdio FILE: %w", f.Pipe.Ino, tfd, tfd, ErrExternal)
		}
		ends, ok := pipes[f.Pipe.Ino]
		if !ok {
			var err error
			if ends, err = t.makePipe(f.Pipe); err != nil {
				return nil, fmt.Errorf("pipe:[%d]: %w", f.Pipe.Ino, err)
			}
			pipes[f.Pipe.Ino] = ends
		}
		end := ends[0]
		if f.Pipe.Write {
			end = ends[1]
		}
		// Each end is one open file description; give it its flags.
		if _, err := unix.FcntlInt(end.Fd(), unix.F_SETFL, f.Flags&(unix.O_NONBLOCK|unix.O_APPEND|unix.O_DIRECT)); err != nil {
			return nil, fmt.Errorf("pipe:[%d]: set flags: %w", f.Pipe.Ino, err)
		}
		return dupFile(end)
	}
	if f.Kind == image.FileSocket {
		return t.openSocket(f)
	}
	return openEvent(f)
}

// openSocket builds a socket; an established connection is built in repair
// mode and resumed once the whole tree is (resumeSockets).
func (t *tree) openSocket(f *image.File) (*os.File, error) {
	s := f.Socket
	if s == nil {
		return nil, fmt.Errorf("socket without its state: %w", image.ErrCorrupt)
	}
	if s.Family == unix.AF_UNIX {
		return t.openUnix(f)
	}
	queue := func(id int) ([]byte, error) {
		if id == 0 {
			return nil, nil
		}
		b, ok := t.img.data[id]
		if !ok {
			return nil, fmt.Errorf("socket queue record %d missing: %w", id, image.ErrCorrupt)
		}
		return b, nil
	}
	if t.opts.Rules != nil {
		c := *s
		if err := rewriteEndpoints(t.opts.Rules, &c); err != nil {
			return nil, err
		}
		s = &c
	}
	recvQ, err := queue(s.RecvDataID)
	if err != nil {
		return nil, err
	}
	sendQ, err := queue(s.SendDataID)
	if err != nil {
		return nil, err
	}
	fd, err := sockets.Open(s, recvQ, sendQ)
	if errors.Is(err, unix.EADDRINUSE) {
		return nil, fmt.Errorf("socket %s: the address is already in use on this machine: %w", s.Local, err)
	}
	if errors.Is(err, unix.EADDRNOTAVAIL) {
		return nil, fmt.Errorf("socket %s: this machine has no such address; move the endpoint with a rewrite rules file (--rules): %w", s.Local, err)
	}
	if err != nil {
		return nil, fmt.Errorf("socket %s %s: %w", s.Local, s.Remote, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, f.Flags&unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, err
	}
	of := os.NewFile(uintptr(fd), "socket")
	if s.TCP != nil {
		t.repairs = append(t.repairs, repairing{f: of, s: s, sendQ: sendQ})
	}
	return of, nil
}

// openUnix rebuilds a connected pair of UNIX sockets, both ends at once
// with their queued messages; the end opened second is taken from
// t.unixPeers.
func (t *tree) openUnix(f *image.File) (*os.File, error) {
	s := f.Socket
	msgs := func(ids []int) ([][]byte, error) {
		var out [][]byte
		for _, id := range ids {
			b, ok := t.img.data[id]
			if !ok {
				return nil, fmt.Errorf("UNIX socket queue record %d missing: %w", id, image.ErrCorrupt)
			}
			out = append(out, b)
		}
		return out, nil
	}
	if s.Peer == 0 {
		q, err := msgs(s.RecvMsgs)
		if err != nil {
			return nil, err
		}
		fd, err := sockets.OpenUnix(s.Type, s.Local, s.State == sockets.StateListen, s.Backlog, q)
		if err != nil {
			return nil, fmt.Errorf("UNIX socket %s: %w", s.Local, err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, f.Flags&unix.O_NONBLOCK); err != nil {
			unix.Close(fd)
			return nil, err
		}
		return os.NewFile(uintptr(fd), "unix"), nil
	}
	of, ok := t.unixPeers[s.Ino]
	if !ok {
		var peer *image.File
		for _, pf := range t.files {
			if pf.Socket != nil && pf.Socket.Family == unix.AF_UNIX && pf.Socket.Ino == s.Peer {
				peer = pf
			}
		}
		if peer == nil || peer.Socket.Peer != s.Ino || peer.Socket.Type != s.Type {
			return nil, fmt.Errorf("UNIX socket %d: its peer %d is not in the image: %w", s.Ino, s.Peer, image.ErrCorrupt)
		}
		mine, err := msgs(s.RecvMsgs)
		if err != nil {
			return nil, err
		}
		theirs, err := msgs(peer.Socket.RecvMsgs)
		if err != nil {
			return nil, err
		}
		a, b, err := sockets.UnixPair(s.Type, mine, theirs)
		if err != nil {
			return nil, fmt.Errorf("UNIX socket pair: %w", err)
		}
		of = os.NewFile(uintptr(a), "unix")
		pf := os.NewFile(uintptr(b), "unix")
		if _, err := unix.FcntlInt(pf.Fd(), unix.F_SETFL, peer.Flags&unix.O_NONBLOCK); err != nil {
			of.Close()
			pf.Close()
			return nil, err
		}
		if t.unixPeers == nil {
			t.unixPeers = map[uint32]*os.File{}
		}
		t.unixPeers[s.Peer] = pf
		t.owned = append(t.owned, pf)
	} else {
		delete(t.unixPeers, s.Ino)
		// t.owned holds the original; pass a copy of our own.
		var err error
		if of, err = dupFile(of); err != nil {
			return nil, err
		}
	}
	if _, err := unix.FcntlInt(of.Fd(), unix.F_SETFL, f.Flags&unix.O_NONBLOCK); err != nil {
		of.Close()
		return nil, err
	}
	return of, nil
}

// rewriteEndpoints applies the rewrite rules to a socket's endpoints.
func rewriteEndpoints(rules *rewrite.Rules, s *image.Socket) error {
	parse := func(a string) (netip.AddrPort, error) {
		if a == "" {
			return netip.AddrPort{}, nil
		}
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			return ap, fmt.Errorf("socket address %q: %w", a, image.ErrCorrupt)
		}
		return ap, nil
	}
	local, err := parse(s.Local)
	if err != nil {
		return err
	}
	remote, err := parse(s.Remote)
	if err != nil {
		return err
	}
	nl, nr := rules.ApplyPair(local, remote)
	if nl.IsValid() && s.Local != "" {
		s.Local = nl.String()
	}
	if nr.IsValid() && s.Remote != "" {
		s.Remote = nr.String()
	}
	return nil
}

// repairing is a restored connection still in repair mode.
type repairing struct {
	f     *os.File
	s     *image.Socket
	sendQ []byte
}

// resumeSockets takes every restored connection out of repair mode, once
// all are built; the network lock stays until Release.
func (t *tree) resumeSockets() error {
	for _, r := range t.repairs {
		st := &sockets.TCPState{TCPRepair: *r.s.TCP}
		if err := sockets.Resume(int(r.f.Fd()), st, r.sendQ); err != nil {
			return fmt.Errorf("socket %s-%s: %w", r.s.Local, r.s.Remote, err)
		}
		// A copy, so that a restore discarded before its release can
		// silence the connection again (see Restored.Kill).
		d, err := dupFile(r.f)
		if err != nil {
			return err
		}
		t.conns = append(t.conns, d)
	}
	t.repairs = nil
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

// makePipe creates a pipe of the old capacity holding the old buffered data.
func (t *tree) makePipe(pp *image.Pipe) ([2]*os.File, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return [2]*os.File{}, err
	}
	ends := [2]*os.File{os.NewFile(uintptr(fds[0]), "pipe-r"), os.NewFile(uintptr(fds[1]), "pipe-w")}
	t.owned = append(t.owned, ends[0], ends[1])
	if pp.Size > 0 {
		if _, err := unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pp.Size); err != nil {
			return ends, fmt.Errorf("set capacity %d: %w", pp.Size, err)
		}
	}
	if pp.DataID != 0 {
		data, ok := t.img.data[pp.DataID]
		if !ok {
			return ends, fmt.Errorf("buffered data record %d missing: %w", pp.DataID, image.ErrCorrupt)
		}
		if _, err := ends[1].Write(data); err != nil {
			return ends, fmt.Errorf("refill %d bytes: %w", len(data), err)
		}
	}
	return ends, nil
}

// openRef opens a file as the image describes it. Files whose content is
// in the image (deleted at dump time) are recreated as unnamed files.
// strict (for mapped files) refuses a file that changed since the dump.
func (t *tree) openRef(ref *image.FileRef, write, strict bool, flags ...int) (*os.File, error) {
	fl := unix.O_RDONLY
	if write {
		fl = unix.O_RDWR
	}
	if len(flags) > 0 {
		fl = flags[0] & openFlagsKept
	}
	if ref.Deleted {
		return t.ghost(ref, fl)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(ref.Path, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", ref.Path, err)
	}
	if st.Mode&syscall.S_IFMT != ref.Mode&syscall.S_IFMT {
		return nil, fmt.Errorf("%s: was mode %#o, now %#o: %w", ref.Path, ref.Mode, st.Mode, ErrFileChanged)
	}
	if strict && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
		mtime := st.Mtim.Sec*1e9 + st.Mtim.Nsec
		if st.Size != ref.Size || mtime != ref.MtimeNs {
			return nil, fmt.Errorf("%s: was %d bytes modified at %d, now %d bytes modified at %d (replaced or rewritten): %w",
				ref.Path, ref.Size, ref.MtimeNs, st.Size, mtime, ErrFileChanged)
		}
	}
	f, err := os.OpenFile(ref.Path, fl|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// ghost recreates a deleted file from the image: an O_TMPFILE file in the
// directory it was in (or /tmp), which has no name, as before.
func (t *tree) ghost(ref *image.FileRef, flags int) (*os.File, error) {
	tmp, ok := t.ghosts[ref.DataID]
	if !ok {
		var err error
		if tmp, err = t.makeGhost(ref); err != nil {
			return nil, err
		}
	}
	// A fresh open file description with the original flags.
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", tmp.Fd()), flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: reopen: %w", ref.Path, err)
	}
	return f, nil
}

// makeGhost creates the unnamed file of a deleted file, once per data ID:
// every fd and mapping of it shares it, as they shared the original.
func (t *tree) makeGhost(ref *image.FileRef) (*os.File, error) {
	data, ok := t.img.data[ref.DataID]
	if !ok {
		return nil, fmt.Errorf("%s: content record %d missing: %w", ref.Path, ref.DataID, image.ErrCorrupt)
	}
	var tmp *os.File
	for _, dir := range []string{filepath.Dir(ref.Path), os.TempDir()} {
		fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, ref.Mode&0o7777)
		if err == nil {
			tmp = os.NewFile(uintptr(fd), ref.Path)
			break
		}
	}
	if tmp == nil {
		return nil, fmt.Errorf("%s: cannot create an unnamed file for the deleted file's content", ref.Path)
	}
	t.owned = append(t.owned, tmp)
	if _, err := tmp.Write(data); err != nil {
		return nil, fmt.Errorf("%s: write content: %w", ref.Path, err)
	}
	if t.ghosts == nil {
		t.ghosts = map[int]*os.File{}
	}
	t.ghosts[ref.DataID] = tmp
	return tmp, nil
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
			if err := rewriteEndpoints(t.opts.Rules, &c); err != nil {
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
	l, err := netlock.Take(name, conns, -1)
	if err != nil {
		return err
	}
	t.lock, t.ownLock = l.Table, true
	return nil
}

// ownProc tells whether f is a file or directory under /proc/PID of a
// process of the dump (a program reading its own /proc/self/task, say).
// Such a path does not exist before the process does, so the process opens
// it itself, once created (builder.fds).
func (t *tree) ownProc(f *image.File) bool {
	if f.Kind != image.FileRegular && f.Kind != image.FileDir {
		return false
	}
	rest, ok := strings.CutPrefix(f.Ref.Path, "/proc/")
	if !ok {
		return false
	}
	pid, _, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(pid)
	if err != nil {
		return false
	}
	_, inDump := t.byPID[n]
	return inDump
}

package dump

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// Files in flight: attached to messages queued in the tree's UNIX sockets
// (SCM_RIGHTS). A peek installs copies of them in ckpt; each is described
// like an fd of the tree (fdkind.DumpEnv.InFlight), in the process whose
// socket holds it.

// inFlight is the dump's state of the files in flight.
type inFlight struct {
	// socks are the inodes of the UNIX sockets in flight that no fd of
	// the tree holds (counted among the tree's sockets: their peers may
	// be in it); described tells those already described.
	socks     map[uint32]bool
	described map[uint32]bool
	// depth is how many in-flight sockets are being described.
	depth int
	// pending are the descriptions made since the last collect, to go
	// into the current process's files.
	pending []image.File
	// queues are the messages read from UNIX sockets' queues, by inode,
	// until their describe takes them (Peeked).
	queues map[uint32][]sockets.UnixMsg
	// index sorts the image's descriptions (t.files up to indexed) by
	// inode, then by kcmp's order (findFile).
	index   map[[2]uint64][]openFile
	indexed int
	// held are ckpt's copies of the descriptions in flight, open until
	// the dump ends (kcmp finds the tree's fds of the same description).
	held []heldFlight
}

// heldFlight is ckpt's copy of a description in flight, closed by
// closeFlight, and its image id.
type heldFlight struct {
	fd *sys.FD
	id int
}

// maxFlightDepth is how deep the dump follows sockets in flight that no
// process holds: such a socket may have files in flight in its own queue,
// but none of them such a socket again.
const maxFlightDepth = 1

// findInFlight reads the queues of the tree's UNIX sockets (and of the
// UNIX sockets in flight in them, to maxFlightDepth+1 levels), keeping
// what it read for their describe (Peeked), and counts the sockets in
// flight among the tree's, before anything is described.
func (t *tree) findInFlight() error {
	if len(t.socks.inos) == 0 {
		return nil
	}
	all, err := t.UnixSockets()
	if err != nil {
		return err
	}
	for _, sock := range t.socks.fds {
		our := sock.Int()
		var st unix.Stat_t
		if unix.Fstat(our, &st) != nil {
			continue
		}
		u, ok := all[uint32(st.Ino)]
		if !ok || !t.socks.inos[u.Ino] || u.State == sockets.UnixListenState || u.Pending == 0 && u.Type != unix.SOCK_SEQPACKET {
			continue
		}
		t.peekFlight(our, u.Ino, u.Type, maxFlightDepth+1)
	}
	return nil
}

// peekFlight reads the queue of the UNIX socket ino (ckpt's fd) and
// looks, depth levels down, into the UNIX sockets in flight there.
// Errors are left for its describe, which reads again.
func (t *tree) peekFlight(fd int, ino uint32, typ, depth int) {
	if depth <= 0 {
		return
	}
	if _, done := t.flight.queues[ino]; done {
		return
	}
	msgs, err := sockets.PeekUnix(fd, ino, typ, t.UnixPieces)
	if err != nil || len(msgs) == 0 {
		return
	}
	if t.flight.queues == nil {
		t.flight.queues = map[uint32][]sockets.UnixMsg{}
	}
	t.flight.queues[ino] = msgs
	for _, m := range msgs {
		for _, r := range m.Rights {
			var st unix.Stat_t
			if unix.Fstat(r, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
				continue
			}
			if d, err := unix.GetsockoptInt(r, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || d != unix.AF_UNIX {
				continue
			}
			sino := uint32(st.Ino)
			if !t.socks.inos[sino] {
				if t.flight.socks == nil {
					t.flight.socks = map[uint32]bool{}
				}
				t.flight.socks[sino] = true
			}
			if typ, err := unix.GetsockoptInt(r, unix.SOL_SOCKET, unix.SO_TYPE); err == nil {
				t.peekFlight(r, sino, typ, depth-1)
			}
		}
	}
}

// Peeked implements fdkind.SocketDumpEnv.
func (t *tree) Peeked(ino uint32) ([]sockets.UnixMsg, bool) {
	msgs, ok := t.flight.queues[ino]
	if ok {
		t.flight.queues[ino] = nil // given: the caller closes its files
	}
	return msgs, ok && msgs != nil
}

// InFlight implements fdkind.DumpEnv.
func (e fileEnv) InFlight(fd int) (image.InFlight, error) {
	t := e.t
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return image.InFlight{}, fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		ino := uint32(st.Ino)
		dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil {
			return image.InFlight{}, fmt.Errorf("socket %d: %w", ino, err)
		}
		if dom != unix.AF_UNIX {
			// A TCP connection would have to be read in repair
			// mode and made again where no fd has it.
			return image.InFlight{}, fmt.Errorf("socket %d of family %d in flight: only UNIX sockets can be restored in flight: %w", ino, dom, fdkind.ErrUnsupported)
		}
		if t.socks.inos[ino] {
			return image.InFlight{Sock: ino}, nil
		}
		if t.flight.described[ino] {
			return image.InFlight{Sock: ino}, nil
		}
		if t.flight.depth >= maxFlightDepth {
			return image.InFlight{}, fmt.Errorf("UNIX socket %d that no process holds, in flight in the queue of another such socket (deeper than %d): %w", ino, maxFlightDepth, fdkind.ErrUnsupported)
		}
		if t.flight.described == nil {
			t.flight.described = map[uint32]bool{}
		}
		t.flight.described[ino] = true
		t.flight.depth++
		f, err := t.describeFlight(fd, &st)
		t.flight.depth--
		if err != nil {
			return image.InFlight{}, fmt.Errorf("UNIX socket %d that no process holds: %w", ino, err)
		}
		if s := f.Socket; s.Creds != nil && !t.groupHeld(s) {
			return image.InFlight{}, fmt.Errorf("UNIX socket %d in flight, whose listener, peer or connections no process holds either: "+
				"it is made in the processes its peer credentials name, with one of them: %w", ino, fdkind.ErrUnsupported)
		}
		if s := f.Socket; s.PeerClosed && s.Creds != nil {
			return image.InFlight{}, fmt.Errorf("UNIX socket %d in flight, whose peer was closed: no process holds it to make it again with its peer credentials: %w", ino, fdkind.ErrUnsupported)
		}
		if s := f.Socket; s.PeerCred != nil && !t.socks.inos[s.Peer] {
			return image.InFlight{}, fmt.Errorf("UNIX socket pair %d-%d in flight, made by process %d, neither end held by a process: %w", ino, s.Peer, s.PeerCred.PID, fdkind.ErrUnsupported)
		}
		return image.InFlight{Sock: ino}, nil
	}
	if id, ok, err := t.findFile(fd, &st); err != nil {
		return image.InFlight{}, err
	} else if ok {
		return image.InFlight{File: id}, nil
	}
	f, err := t.describeFlight(fd, &st)
	if err != nil {
		return image.InFlight{}, err
	}
	return image.InFlight{File: f.ID}, nil
}

// findFile finds the description of ckpt's fd among those of the image
// (t.files): by inode, then by kcmp's order of descriptions in a sorted
// index (many files in flight of one inode, /dev/null, cost a search
// each, not a comparison with every other).
func (t *tree) findFile(fd int, st *unix.Stat_t) (int, bool, error) {
	if t.flight.index == nil {
		t.flight.index = map[[2]uint64][]openFile{}
	}
	cmp := func(a openFile, pid sys.PID, fd sys.TargetFD) (int, error) {
		return sys.CompareFiles(a.pid, a.fd, pid, fd)
	}
	// search finds where (pid, fd) is or goes in a sorted list.
	search := func(list []openFile, pid sys.PID, fd sys.TargetFD) (int, bool, error) {
		lo, hi := 0, len(list)
		for lo < hi {
			mid := (lo + hi) / 2
			c, err := cmp(list[mid], pid, fd)
			if err != nil {
				return 0, false, err
			}
			if c == 0 {
				return mid, true, nil
			}
			if c < 0 {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return lo, false, nil
	}
	for ; t.flight.indexed < len(t.files); t.flight.indexed++ {
		o := t.files[t.flight.indexed]
		key := [2]uint64{o.dev, o.ino}
		list := t.flight.index[key]
		at, found, err := search(list, o.pid, o.fd)
		if err != nil {
			// A tree fd closed since? (The tree is frozen.) Compare
			// one by one instead.
			return t.findFileSlowly(fd, st)
		}
		if !found {
			list = append(list, openFile{})
			copy(list[at+1:], list[at:])
			list[at] = o
			t.flight.index[key] = list
		}
	}
	list := t.flight.index[[2]uint64{st.Dev, st.Ino}]
	at, found, err := search(list, sys.Getpid(), sys.TargetFD(fd)) // ckpt's own copy
	if err != nil {
		return t.findFileSlowly(fd, st)
	}
	if found {
		return list[at].id, true, nil
	}
	return 0, false, nil
}

// findFileSlowly compares fd with every description of its inode.
func (t *tree) findFileSlowly(fd int, st *unix.Stat_t) (int, bool, error) {
	for _, o := range t.files {
		if o.dev == st.Dev && o.ino == st.Ino && sameFile(o.pid, o.fd, sys.Getpid(), sys.TargetFD(fd)) {
			return o.id, true, nil
		}
	}
	return 0, false, nil
}

// groupHeld tells whether a socket in flight that no process holds is
// made with others of the tree (its listener, its peer, the connections
// of a listener) that a process holds: sockets made in the processes
// their credentials name are made with the first of their group the
// restore opens. A listener alone is made by itself.
func (t *tree) groupHeld(s *image.Socket) bool {
	if s.State == sockets.StateListen && len(s.Accepted) == 0 && len(s.AcceptQueue) == 0 {
		return true
	}
	for _, ino := range append([]uint32{s.AcceptedFrom, s.AcceptOf, s.Peer}, append(s.Accepted, s.AcceptQueue...)...) {
		if ino != 0 && t.socks.inos[ino] {
			return true
		}
	}
	return false
}

// describeFlight describes a file in flight (ckpt's copy fd) with its
// kind, as a new description of the current process.
func (t *tree) describeFlight(fd int, st *unix.Stat_t) (*image.File, error) {
	self := sys.Getpid()
	copied, err := sys.Dup(fd)
	if err != nil {
		return nil, err
	}
	defer copied.Close() // on error; held until the dump ends otherwise
	cp := copied.Int()
	link, err := os.Readlink(proc.Path(self, "fd", strconv.Itoa(cp)))
	if err != nil {
		return nil, err
	}
	src := &fdkind.Source{PID: self, FD: sys.TargetFD(cp), Link: link, Stat: *st}
	if src.Info, err = proc.ReadFDInfo(self, sys.TargetFD(cp)); err != nil {
		return nil, fmt.Errorf("%s: fdinfo: %w", link, err)
	}
	if fl := src.Info.Flags; fl&unix.O_CLOEXEC != 0 {
		// ckpt's copy is close-on-exec, the description is not.
		src.Info.Flags = fl &^ unix.O_CLOEXEC
	}
	f, err := fdkind.Describe(fileEnv{t}, src, cp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", link, err)
	}
	if why := notInFlight(f); why != "" {
		return nil, fmt.Errorf("%s: %s in flight cannot be restored: %w", link, why, fdkind.ErrUnsupported)
	}
	if src.Stat.Mode&unix.S_IFMT == unix.S_IFSOCK {
		if s := f.Socket; s == nil || s.Family != unix.AF_UNIX {
			return nil, fmt.Errorf("%s: %w", link, fdkind.ErrUnsupported)
		}
	}
	f.ID = len(t.files)
	t.files = append(t.files, openFile{pid: self, fd: sys.TargetFD(cp), dev: st.Dev, ino: st.Ino, id: f.ID})
	t.flight.held = append(t.flight.held, heldFlight{fd: copied.Move(), id: f.ID})
	t.flight.pending = append(t.flight.pending, *f)
	return f, nil
}

// takeFlight hands the descriptions of files in flight made since the
// last call to the process being collected.
func (t *tree) takeFlight() []image.File {
	p := t.flight.pending
	t.flight.pending = nil
	return p
}

// closeFlight closes ckpt's copies of the files in flight.
func (t *tree) closeFlight() {
	for _, h := range t.flight.held {
		h.fd.Close()
	}
	t.flight.held = nil
	for _, msgs := range t.flight.queues {
		sockets.CloseRights(msgs)
	}
	t.flight.queues = nil
}

// notInFlight says why a description cannot be restored in flight ("" if
// it can): kinds whose restore happens inside the process that holds them
// (ckpt-redo has no copy of its own to send), or that set up items in it.
func notInFlight(f *image.File) string {
	switch f.Kind {
	case image.FileEpoll:
		return "an epoll instance"
	case image.FilePtmx, image.FileTTY:
		return "a terminal"
	case image.FilePidfd:
		return "a pidfd"
	}
	if f.Ref.ProcGone != 0 || strings.HasPrefix(f.Ref.Path, "/proc/") {
		return "a file of /proc"
	}
	return ""
}

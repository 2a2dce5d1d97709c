package dump

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// heldFD names an fd of a process of the tree.
type heldFD struct {
	pid sys.PID
	fd  sys.TargetFD
}

// sockState is what the dump of a tree holds of its sockets: ckpt's own
// copies of them (pidfd_getfd), those put in repair mode, and the lock.
type sockState struct {
	fds   map[heldFD]*sys.FD          // ckpt's copy of the same socket
	reuse map[int]int                 // ckpt's fd of a connection -> its SO_REUSEADDR
	conns []int                       // ckpt fds of the dumped connections
	unix  map[uint32]sockets.UnixInfo // sock_diag's view, read on first need
	inos  map[uint32]bool             // inodes of the tree's UNIX sockets
	// netns is the network namespace of the tree's sockets when it is
	// not ckpt's own (nil then).
	netns *os.File
	lock  *netlock.Lock
	guard *netlock.Guard
	// silenced: the connections were put back in repair mode to die.
	silenced bool
	// defs is what sockets.DescribeWith compares every socket with.
	defs sockets.Defaults
	// unixRd: the BPF UNIX reader and what it read (unixreader.go).
	unixRd *unixReaderState
	// tcpLocks: the sk_userlocks of the namespace's TCP sockets (tcplocks.go).
	tcpLocks *tcpLockState
	// hidden: what no getsockopt gives of its INET sockets (sockhidden.go).
	hidden *hiddenState
}

// takeSockets gets a copy of every socket of the tree and, if any is a
// TCP connection (established, connecting or closing) or listener, takes
// the network lock before anything is read from them.
func (t *tree) takeSockets() error {
	t.socks.fds = map[heldFD]*sys.FD{}
	t.socks.reuse = map[int]int{}
	var conns []netlock.Conn
	var guarded []netlock.Socket
	for _, m := range t.members {
		if m.fz == nil {
			continue
		}
		fds, err := proc.FDs(m.rd())
		if err != nil {
			return fmt.Errorf("process %d: list fds: %w", m.pid, err)
		}
		var pidfd *sys.FD
		for _, fd := range fds {
			var st syscall.Stat_t
			if err := syscall.Stat(proc.Path(m.rd(), "fd", fd.String()), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
				continue
			}
			if pidfd == nil {
				if pidfd, err = sys.PidfdOpen(m.rd(), pidfdFlags(m.fz)); err != nil {
					return fmt.Errorf("process %d: %w", m.pid, err)
				}
				defer pidfd.Close()
			}
			copied, err := sys.PidfdGetfd(pidfd, fd) // close-on-exec
			if err != nil {
				return fmt.Errorf("process %d fd %d: %w", m.pid, fd, err)
			}
			t.socks.fds[heldFD{m.rd(), fd}] = copied // closed by closeSockets
			our := copied.Int()
			if dom, err := unix.GetsockoptInt(our, unix.SOL_SOCKET, unix.SO_DOMAIN); err == nil && dom == unix.AF_UNIX {
				if t.socks.inos == nil {
					t.socks.inos = map[uint32]bool{}
				}
				t.socks.inos[uint32(st.Ino)] = true
			}
			s, err := sockets.State(our)
			if err == nil && s == sockets.StateListen {
				if la, err := unix.Getsockname(our); err == nil {
					conns = append(conns, netlock.Conn{Local: sockets.AddrPort(la)})
				}
			}
			if err == nil && sockets.Connected(s) {
				la, ra, err := sockets.Endpoints(our)
				if err == nil {
					conns = append(conns, netlock.Conn{Local: la, Remote: ra})
					reuse := sockets.ReuseAddr(our)
					t.socks.reuse[our] = reuse
					// A copy for the guard: an *os.File closes its fd when
					// collected, and ckpt's copy must stay open.
					if dup, err := sys.Dup(our); err == nil {
						guarded = append(guarded, netlock.Socket{File: dup.File("socket"), Reuse: reuse})
					}
				}
			}
		}
		if pidfd != nil {
			if err := t.socks.setNetns(m.rd()); err != nil {
				return fmt.Errorf("process %d: %w", m.pid, err)
			}
		}
	}
	if err := t.findInFlight(); err != nil {
		return err
	}
	if len(guarded) == 0 && len(conns) == 0 {
		return nil
	}
	defer func() {
		for _, s := range guarded {
			s.File.Close()
		}
	}()
	if table, held, ok, err := netlock.Holding(conns, t.socks.netnsFD()); err != nil {
		return err
	} else if ok {
		what := held.Local.String()
		if held.Remote.IsValid() {
			what = "connection " + what + " - " + held.Remote.String()
		} else {
			what = "listener " + what
		}
		return fmt.Errorf("%s: its packets are dropped by the network lock %s, left by a dump that was not restored or by a failed restore: "+
			"restore that image, or lift the lock with `ckpt unlock --table %s`, then dump: %w", what, table, table, ErrStaleLock)
	}
	name := fmt.Sprintf("%d-%d", t.members[0].pid, time.Now().UnixNano()%1e9)
	// The peers' packets are held (by a process that outlives a killing
	// dump) and let through once the restored sockets are out of repair.
	lock, err := netlock.TakeHeld(name, conns, t.socks.netns, t.opts.GuardExe)
	if err != nil {
		return err
	}
	if lock.HoldErr != nil {
		t.opts.logf("warning: network lock %s drops the peers' packets instead of holding them: %v", lock.Table, lock.HoldErr)
	}
	t.socks.lock = lock
	if t.opts.GuardExe != "" {
		g, err := netlock.StartGuard(t.opts.GuardExe, lock.Table, guarded, t.socks.netns)
		if err != nil {
			netlock.Release(lock.Table, t.socks.netnsFD())
			t.socks.lock = nil
			return err
		}
		t.socks.guard = g
	}
	return nil
}

// setNetns records the network namespace of a process that has sockets:
// the lock goes there, and sock_diag is asked there. Every process of the
// tree with sockets must be in the same one.
func (s *sockState) setNetns(pid sys.PID) error {
	var mine, theirs syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &mine); err != nil {
		return err
	}
	path := proc.Path(pid, "ns", "net")
	if err := syscall.Stat(path, &theirs); err != nil {
		return err
	}
	if s.netns != nil {
		var cur syscall.Stat_t
		if err := syscall.Fstat(int(s.netns.Fd()), &cur); err != nil {
			return err
		}
		if cur.Ino != theirs.Ino {
			return fmt.Errorf("its sockets are in another network namespace than those of the rest of the tree: %w", ErrUnsupported)
		}
		return nil
	}
	if theirs.Ino == mine.Ino {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open network namespace: %w", err)
	}
	s.netns = f
	return nil
}

func (s *sockState) netnsFD() int {
	if s.netns == nil {
		return -1
	}
	return int(s.netns.Fd())
}

// unixSockets asks sock_diag, in the tree's network namespace, for its
// UNIX sockets. Entering another namespace takes a thread of its own, which
// is thrown away afterwards.
func (s *sockState) unixSockets() (m map[uint32]sockets.UnixInfo, err error) {
	err = sys.InNetns(s.netnsFD(), func() error {
		m, err = sockets.UnixSockets()
		return err
	})
	return m, err
}

// releaseSockets lifts the lock (a failed dump, or one that leaves the
// processes running): the connections were never left in repair mode.
func (t *tree) releaseSockets() {
	if t.socks.lock != nil {
		t.socks.lock.HolderStarted() // whoever holds the packets lets them go
		if t.socks.silenced {
			// Killed (DropLock): the connections live on elsewhere; what
			// their peers sent meanwhile would meet no socket here.
			netlock.Discard(t.socks.lock.Table, t.socks.netnsFD())
		} else {
			netlock.Release(t.socks.lock.Table, t.socks.netnsFD())
		}
		switch {
		case t.socks.guard == nil:
		case t.socks.silenced:
			t.socks.guard.Drop() // takes its copies out of repair mode
		default:
			// Lifted already, and the connections never left: the
			// guard must not lift the lock again. A second release
			// would find the holder on its way out and warn that held
			// packets were dropped, which they were not.
			t.socks.guard.Keep()
		}
		t.socks.lock, t.socks.guard = nil, nil
	}
}

// silence puts every dumped connection back in repair mode just before the
// processes are killed: closed in repair mode, they send neither FIN nor
// RST.
func (t *tree) silence() {
	t.socks.silenced = true
	for _, fd := range t.socks.conns {
		sockets.EnterRepair(fd)
	}
}

// keepLock leaves the lock in place after a successful dump: the
// connections stay silent until they are restored.
func (t *tree) keepLock() error {
	if err := t.socks.lock.HolderStarted(); err != nil {
		t.opts.logf("warning: network lock %s: %v: the peers' packets are dropped once this dump exits, not held", t.socks.lock.Table, err)
	}
	if t.socks.guard != nil {
		if err := t.socks.guard.Keep(); err != nil {
			return fmt.Errorf("network lock guard: %w", err)
		}
		t.socks.guard = nil
	}
	return nil
}

func (t *tree) closeSockets() {
	t.closeFlight()
	t.closeUnixReader()
	t.closeTCPLocks()
	t.closeHidden()
	for _, fd := range t.socks.fds {
		fd.Close()
	}
	t.socks.fds = nil
	if t.socks.netns != nil {
		t.socks.netns.Close()
	}
}

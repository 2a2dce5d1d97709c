package dump

import (
	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/sockets"
)

// tcpLockState is what the dump read of its TCP sockets' sk_userlocks
// (bpftask.TCPReader): the reader, opened and checked on first need, and
// the locks of every TCP socket of the tree's network namespace by
// cookie, read once (again only if a socket is not in it: one of
// another namespace is left to the restore's guess).
type tcpLockState struct {
	reader  *bpftask.TCPReader
	openErr error
	locks   map[uint64]uint8
	// listeners are the namespace's TCP listeners, listed on first need
	// (sockets.ConnectMayChoosePort).
	listeners sockets.Listeners
}

// PortBound implements fdkind.SocketDumpEnv: whether the program bound
// the port of the TCP socket fd (SOCK_BINDPORT_LOCK). A kernel the
// reader cannot run (bpftask.ErrTCPUnavailable), or reads wrong (Verify,
// bpftask.ErrTCPMismatch), gives ok false, said once in the dump's log:
// the restore then guesses from ip_local_port_range.
//
// The reader is asked only about a connection whose port connect could
// have chosen (sockets.ConnectMayChoosePort, the namespace's listeners listed once): for any other the
// restore's own rule is exact (a port outside the range was bound; an
// accepted connection's is its listener's), so a dump of a server's
// accepted connections does not load it (about 25 ms, while frozen).
func (t *tree) PortBound(fd int) (bound, ok bool, err error) {
	w := t.socks.tcpLocks
	if w == nil {
		w = &tcpLockState{}
		t.socks.tcpLocks = w
	}
	if may, err := sockets.ConnectMayChoosePort(fd, &w.listeners); err != nil || !may {
		return false, false, err
	}
	if w.reader == nil && w.openErr == nil {
		w.reader, w.openErr = bpftask.OpenTCP()
		if w.openErr == nil {
			if w.openErr = t.socks.inNetns(w.reader.Verify); w.openErr != nil {
				w.reader.Close()
				w.reader = nil
			}
		}
		if w.openErr != nil {
			t.opts.logf("TCP connections: whether their ports were bound by the program is guessed from ip_local_port_range: %v", w.openErr)
		}
	}
	if w.openErr != nil {
		return false, false, nil
	}
	cookie, err := bpftask.Cookie(fd)
	if err != nil {
		return false, false, err
	}
	l, found := w.locks[cookie]
	if !found {
		err := t.socks.inNetns(func() (err error) {
			w.locks, err = w.reader.Locks()
			return err
		})
		if err != nil {
			return false, false, err
		}
		if l, found = w.locks[cookie]; !found {
			// Not in the tree's network namespace (a socket passed
			// from another one): the restore guesses, as without
			// the reader.
			t.opts.logf("TCP socket (cookie %d) not in the tree's network namespace: whether its port was bound by the program is guessed from ip_local_port_range", cookie)
			return false, false, nil
		}
	}
	return l&bpftask.LockBindPort != 0, true, nil
}

// closeTCPLocks unloads the reader.
func (t *tree) closeTCPLocks() {
	if w := t.socks.tcpLocks; w != nil && w.reader != nil {
		w.reader.Close()
		w.reader = nil
	}
}

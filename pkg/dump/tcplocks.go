package dump

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/fdkind"
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
	// lockErr, stateErr: why the reader's lock or socket state part
	// is not trusted (Verify, VerifySockState, run on first need).
	lockErr, stateErr         error
	lockChecked, stateChecked bool
	locks                     map[uint64]uint8
	// listeners are the namespace's TCP listeners, listed on first need
	// (sockets.ConnectMayChoosePort).
	listeners sockets.Listeners
}

// tcpState is the tree's tcpLockState, made on first need.
func (t *tree) tcpState() *tcpLockState {
	if t.socks.tcpLocks == nil {
		t.socks.tcpLocks = &tcpLockState{}
	}
	return t.socks.tcpLocks
}

// openTCPReader loads the reader once (bpftask.OpenTCP): the lock and
// socket state programs, one collection.
func (t *tree) openTCPReader(w *tcpLockState) error {
	if w.reader == nil && w.openErr == nil {
		w.reader, w.openErr = bpftask.OpenTCP(t.kernel)
	}
	return w.openErr
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
	w := t.tcpState()
	if may, err := sockets.ConnectMayChoosePort(fd, &w.listeners); err != nil || !may {
		return false, false, err
	}
	if !w.lockChecked {
		w.lockChecked = true
		if w.lockErr = t.openTCPReader(w); w.lockErr == nil {
			w.lockErr = t.socks.inNetns(w.reader.Verify)
		}
		if w.lockErr != nil {
			t.opts.logf("TCP connections: whether their ports were bound by the program is guessed from ip_local_port_range: %v", w.lockErr)
		}
	}
	if w.lockErr != nil {
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

// SockState implements fdkind.SocketDumpEnv: the socket layer state of
// the TCP socket fd (bpftask.TCPReader.SockState), where the restore
// needs it (sockets.SockStateNeeded) and the connection was not accepted
// from a listener (sockets.ListenerHolds: accept makes it connected): 0
// elsewhere. A kernel the reader cannot run, or reads wrong
// (VerifySockState), gives an error wrapping fdkind.ErrUnsupported: such
// a socket cannot be restored exactly (whether its connect() was
// non-blocking, which a later connect() shows, is unknown).
func (t *tree) SockState(fd, state, shutdown int) (uint8, error) {
	if !sockets.SockStateNeeded(state, shutdown) {
		return 0, nil
	}
	w := t.tcpState()
	if held, err := sockets.ListenerHolds(fd, &w.listeners); err != nil || held {
		return sockets.SockConnected, err
	}
	if !w.stateChecked {
		w.stateChecked = true
		// The state is the socket layer's, the same in every network
		// namespace: it is checked on sockets made in ckpt's own, or
		// else in the tree's (whose loopback may be the one up).
		if w.stateErr = t.openTCPReader(w); w.stateErr == nil {
			if w.stateErr = w.reader.VerifySockState(); w.stateErr != nil {
				w.stateErr = t.socks.inNetns(w.reader.VerifySockState)
			}
		}
	}
	if w.stateErr != nil {
		return 0, fmt.Errorf("whether the program's connect() was non-blocking (the socket layer's state, which a later connect() shows) cannot be read on this kernel (%v): cannot be restored: %w", w.stateErr, fdkind.ErrUnsupported)
	}
	return w.reader.SockState(fd)
}

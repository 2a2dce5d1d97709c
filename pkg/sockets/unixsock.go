package sockets

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// UnixMsg is a message queued in a UNIX socket: its bytes, and the name of
// the socket that sent it as recvfrom gives it ("" unnamed).
type UnixMsg struct {
	Data []byte
	From string
	// Rights are the files in flight attached to it (SCM_RIGHTS): at
	// the dump, ckpt's copies (CloseRights closes them); at the restore,
	// ckpt-redo's fds of the files to send.
	Rights []int
	// held owns Rights at the dump (peekUnix sets it, CloseRights closes
	// it, once however many copies of the message do); nil at the
	// restore, whose Rights belong to the files they are the fds of.
	held []*sys.FD
	// Cred is the credentials it carries (its sender's pid, uid, gid),
	// nil if the kernel gave none.
	Cred *unix.Ucred
}

// maxUnixMsg is the largest datagram the dump reads.
const maxUnixMsg = 4 << 20

// DescribeUnix saves a UNIX socket (one of ckpt's fds) whose inode is ino:
// bound, listening or neither; one end of a connection whose other end is
// in the dump (inTree) or was closed; its options, shutdown state and the
// messages in its receive queue (never consumed), with their credentials
// and their files in flight (ckpt's copies: the caller closes them,
// CloseRights). It refuses, naming them, connections to sockets outside
// the dump, connections waiting in a listener's queue, and a datagram
// socket connected one way to another socket of the dump.
//
// peeked, if not nil, gives the messages the dump already read from the
// socket (PeekUnix), which are not read again. pieces, if not nil, reads
// the pieces of a stream's queue where a peek cannot tell them apart (see
// cutPieces); without it such a queue is refused (ErrPieceStart).
//
// With waiting, the caller reads what the server end of a waiting
// connection holds (pkg/bpftask): a listener whose queue holds a
// connection whose client was closed (0 in AcceptQueue), and a waiting
// client that sent data, are not refused here.
func DescribeUnix(fd int, ino uint32, all map[uint32]UnixInfo, inTree func(uint32) bool, peeked func(uint32) ([]UnixMsg, bool), pieces Pieces, waiting bool) (*image.Socket, []UnixMsg, error) {
	if peeked != nil {
		if msgs, ok := peeked(ino); ok {
			s, q, err := describeUnix(fd, ino, all, inTree, msgs, nil, waiting)
			if err != nil || q == nil {
				CloseRights(msgs)
			}
			return s, q, err
		}
	}
	return describeUnix(fd, ino, all, inTree, nil, pieces, waiting)
}

func describeUnix(fd int, ino uint32, all map[uint32]UnixInfo, inTree func(uint32) bool, peeked []UnixMsg, pieces Pieces, waiting bool) (*image.Socket, []UnixMsg, error) {
	u, ok := all[ino]
	if !ok {
		return nil, nil, fmt.Errorf("UNIX socket %d not found by sock_diag: %w", ino, ErrState)
	}
	s := &image.Socket{Family: unix.AF_UNIX, Type: u.Type, Ino: ino, Local: u.Name, Shutdown: u.Shutdown}
	switch {
	case u.State == UnixListenState:
		for _, c := range u.Icons {
			if c == 0 && !waiting || c != 0 && !inTree(c) {
				return nil, nil, fmt.Errorf("UNIX socket %s with a connection from socket %d of a process outside the dump not accepted yet: %w", u.Name, c, ErrAcceptQueue)
			}
		}
		s.State, s.Backlog, s.AcceptQueue = StateListen, u.Backlog, u.Icons
		for _, o := range all {
			if o.State == StateEstablished && o.Name == u.Name && o.Type == u.Type && inTree(o.Ino) {
				s.Accepted = append(s.Accepted, o.Ino)
			}
		}
		slices.Sort(s.Accepted)
	case u.State == StateEstablished && u.Peer == 0 && u.Type != unix.SOCK_DGRAM && u.Shutdown != 3:
		// Connected, and the other end is no socket yet: the
		// connection waits in a listener's accept queue.
		var l *UnixInfo
		for _, o := range all {
			if slices.Contains(o.Icons, ino) {
				l = &o
				break
			}
		}
		switch {
		case l == nil:
			return nil, nil, fmt.Errorf("UNIX socket connected to no socket sock_diag knows: %w", ErrState)
		case !inTree(l.Ino):
			return nil, nil, fmt.Errorf("UNIX socket %d connected to %s of a process outside the dump, not accepted yet: %w", ino, l.Name, ErrExternalPeer)
		}
		if out, err := sys.IoctlInt(fd, unix.SIOCOUTQ); err != nil || out > 0 && !waiting {
			return nil, nil, fmt.Errorf("UNIX socket with data sent on a connection %s has not accepted yet (%d bytes of buffer; it cannot be read back): %w", l.Name, out, ErrAcceptQueue)
		}
		s.State, s.AcceptOf = StateEstablished, l.Ino
	case u.State == StateEstablished && u.Peer == 0 && u.Type == unix.SOCK_DGRAM && (connectedTo(all, ino) || u.Name != ""):
		// A datagram socket others connected to (connect sets its
		// state too), even if they are gone since: it stays bound
		// and unconnected; those of the dump connect to it again.
	case u.State == StateEstablished && u.Peer == 0:
		// The peer was closed: sock_diag no longer knows its inode.
		s.State, s.PeerClosed = StateEstablished, true
	case u.State == StateEstablished:
		p := all[u.Peer]
		if !inTree(u.Peer) {
			return nil, nil, fmt.Errorf("UNIX socket %d connected to socket %d %q of a process outside the dump: %w", ino, u.Peer, p.Name, ErrExternalPeer)
		}
		switch {
		case p.Peer == ino:
			s.State, s.Peer = StateEstablished, u.Peer
		case u.Type == unix.SOCK_DGRAM && p.Peer == 0 && p.Name != "":
			// Connected one way to a named socket, which is rebuilt
			// first; this one connects to it again.
			s.State, s.ConnectedTo = StateEstablished, u.Peer
		default:
			return nil, nil, fmt.Errorf("UNIX datagram socket connected one way to socket %d %q of the dump, itself connected or unnamed: %w", u.Peer, p.Name, ErrState)
		}
	}
	if s.State == StateEstablished && s.AcceptOf == 0 && u.Name != "" {
		// An accepted connection bears its listener's name: rebuilt by
		// connecting to the rebuilt listener, if it is in the dump.
		for _, o := range all {
			if o.State == UnixListenState && o.Name == u.Name && o.Type == u.Type && inTree(o.Ino) {
				s.AcceptedFrom = o.Ino
			}
		}
	}
	if u.Type == unix.SOCK_DGRAM && u.Peer == 0 && u.Name != "" {
		for _, o := range all {
			if o.Peer == ino && o.Type == unix.SOCK_DGRAM && inTree(o.Ino) {
				s.ConnectedFrom = append(s.ConnectedFrom, o.Ino)
			}
		}
		slices.Sort(s.ConnectedFrom)
	}
	// A stream or seqpacket peer closed with data unread left
	// ECONNRESET pending (the only error such a socket gets): rebuilt
	// the same way.
	s.PeerReset = s.PeerClosed && u.Type != unix.SOCK_DGRAM && pendingError(fd)
	var err error
	if s.Options, err = readOptions(fd, unix.AF_UNIX, u.Type, 0, false, s.PeerReset, nil); err != nil {
		return nil, nil, err
	}
	if u.State == UnixListenState || s.AcceptOf != 0 || u.Type != unix.SOCK_DGRAM && u.State != StateEstablished {
		return s, nil, nil // no queue: a stream socket that is not connected
	}
	msgs := peeked
	if msgs == nil {
		limit := -1
		if s.PeerReset {
			// A peek past the data would take the pending error:
			// stop at the bytes queued.
			if limit, err = sys.IoctlInt(fd, unix.SIOCINQ); err != nil {
				return nil, nil, err
			}
		}
		if msgs, err = peekUnix(fd, ino, u.Type, limit, pieces); err != nil {
			return nil, nil, err
		}
	}
	if len(msgs) > 0 && u.State != StateEstablished && u.Name == "" {
		CloseRights(msgs)
		return nil, nil, fmt.Errorf("messages queued on an unbound, unconnected UNIX socket: %w", ErrState)
	}
	return s, msgs, nil
}

// UnixPair rebuilds two connected UNIX sockets of the dump, a and b, with
// their early options; fill then refills the messages queued for each
// (qa for a, sent by b) and sets their late options and shutdown state.
func UnixPair(a, b *image.Socket, qa, qb []UnixMsg, how Connecting) (*sys.FD, *sys.FD, Fill, error) {
	if a.Local != "" || b.Local != "" {
		return namedPair(a, b, qa, qb, how)
	}
	fa, fb, err := sys.Socketpair(unix.AF_UNIX, a.Type|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	defer fa.Close()
	defer fb.Close()
	fds := [2]int{fa.Int(), fb.Int()}
	if err := earlyPair(fds, [2]*image.Socket{a, b}); err != nil {
		return nil, nil, nil, err
	}
	return fa.Move(), fb.Move(), func(r Refill) error {
		return fillAndFinish(fds, [2]*image.Socket{a, b}, [2][]UnixMsg{qa, qb}, r)
	}, nil
}

// FinishPair gives an unnamed pair made elsewhere (socketpair in the
// process that made it at the dump, see fdkind) what UnixPair gives the
// pairs it makes: early options now; fill then gives queues (qa for a,
// sent by b), late options and shutdown state.
func FinishPair(fds [2]int, a, b *image.Socket, qa, qb []UnixMsg) (Fill, error) {
	if err := earlyPair(fds, [2]*image.Socket{a, b}); err != nil {
		return nil, err
	}
	return func(r Refill) error {
		return fillAndFinish(fds, [2]*image.Socket{a, b}, [2][]UnixMsg{qa, qb}, r)
	}, nil
}

// earlyPair sets the early options of both ends of a pair (a nil image:
// that end is left as is).
func earlyPair(fds [2]int, s [2]*image.Socket) error {
	for i := range fds {
		if s[i] == nil {
			continue
		}
		if err := setOptions(fds[i], s[i].Options, early, nil); err != nil {
			return err
		}
	}
	return nil
}

// fillAndFinish refills the queues of a connected pair and sets their
// late options and shutdown state (a nil image: that end is left as is).
func fillAndFinish(fds [2]int, s [2]*image.Socket, q [2][]UnixMsg, r Refill) error {
	for i := range fds {
		if err := fillUnix(fds[1-i], fds[i], q[i], func(m UnixMsg) error { return sendMsg(fds[1-i], m, nil, r.Hold) }); err != nil {
			return err
		}
	}
	for i := range fds {
		if s[i] == nil {
			continue
		}
		if err := r.finish(fds[i], s[i]); err != nil {
			return err
		}
	}
	return nil
}

// fillUnix refills the receive queue of to with msgs, sent by send (from
// the socket from, -1 for temporary senders), with buffers raised so that
// nothing blocks; the saved sizes are set back by finishUnix.
func fillUnix(from, to int, msgs []UnixMsg, send func(UnixMsg) error) error {
	total := 0
	for _, m := range msgs {
		total += len(m.Data) + 1024
	}
	if total == 0 {
		return nil
	}
	if from >= 0 {
		if err := raiseBuffers(from, total, 0); err != nil {
			return err
		}
	}
	if err := raiseBuffers(to, 0, total); err != nil {
		return err
	}
	// A message sent without credentials gets none only if the receiver
	// does not ask for them either.
	undo, err := credsOff(to)
	if err != nil {
		return err
	}
	defer undo()
	for _, m := range msgs {
		if err := send(m); err != nil {
			return fmt.Errorf("refill the queue: %w", err)
		}
	}
	return nil
}

// finishUnix sets the late options of a rebuilt socket (buffers back to
// their saved sizes) and its shutdown state.
func finishUnix(fd int, s *image.Socket) error {
	if err := setOptions(fd, mergeOptions(freshBuffers(s.Type), s.Options), late, nil); err != nil {
		return err
	}
	if !s.PeerClosed {
		return shutdown(fd, s.Shutdown)
	}
	return nil
}

// freshBuffers are the buffer sizes of a new UNIX socket, to put back
// after a refill raised them.
func freshBuffers(typ int) []image.SockOpt {
	fd, err := sys.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer fd.Close()
	return bufferSizes(fd.Int())
}

// sendNow sends a message without blocking, to the socket's peer or to.
func sendNow(fd int, b []byte, to unix.Sockaddr) error {
	return sendWith(fd, UnixMsg{Data: b}, to)
}

// OpenUnix builds a UNIX socket that is not one end of a pair of the dump:
// bound to its name (a stale socket file of the dead process is
// replaced), listening with its backlog, or a datagram socket whose queued
// messages fill sends to it again from their senders' names; or a
// connected socket whose peer was closed (a pair whose other end fill
// closes once the queue is refilled).
func OpenUnix(s *image.Socket, queue []UnixMsg) (*sys.FD, Fill, error) {
	if s.PeerClosed {
		a, b, err := sys.Socketpair(unix.AF_UNIX, s.Type|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, nil, err
		}
		fill, err := ClosedPeer(a, b, s, queue) // b is fill's now
		if err != nil {
			return nil, nil, err
		}
		return a, fill, nil
	}
	sock, err := sys.Socket(unix.AF_UNIX, s.Type|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	defer sock.Close()
	fd := sock.Int()
	if err := bindUnconnected(fd, s); err != nil {
		return nil, nil, err
	}
	return sock.Move(), func(r Refill) error { return FillUnix(fd, s, queue, nil, r) }, nil
}

// OpenUnixBound makes an unconnected UNIX socket with its early options,
// bound to its name and listening if it was: its queue is filled later
// by FillUnix, once every socket whose name a queued message bears is
// there too.
func OpenUnixBound(s *image.Socket) (*sys.FD, error) {
	sock, err := sys.Socket(unix.AF_UNIX, s.Type|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	if err := bindUnconnected(sock.Int(), s); err != nil {
		return nil, err
	}
	return sock.Move(), nil
}

// ClosedPeer makes of a pair (made elsewhere: in the process its peer
// credentials name, see fdkind) a socket s whose peer was closed: end
// gets s's early options; fill refills its queue from peer, then closes
// peer (resetting end if s was reset). peer is fill's from the call on
// (the caller's FD is left closed); end stays the caller's. On error both
// are closed.
func ClosedPeer(end, peer *sys.FD, s *image.Socket, queue []UnixMsg) (Fill, error) {
	fds := [2]int{end.Int(), peer.Int()}
	peer = peer.Move()
	if err := earlyPair(fds, [2]*image.Socket{s, nil}); err != nil {
		end.Close()
		peer.Close()
		return nil, err
	}
	return func(r Refill) error {
		defer peer.Close()
		err := fillAndFinish(fds, [2]*image.Socket{s, nil}, [2][]UnixMsg{queue, nil}, r)
		if err == nil && s.PeerReset {
			// Closing a socket with data unread resets its peer.
			err = sendNow(fds[0], []byte{0}, nil)
		}
		return err
	}, nil
}

func bindUnconnected(fd int, s *image.Socket) error {
	if err := setOptions(fd, s.Options, early, nil); err != nil {
		return err
	}
	if s.Local != "" {
		if err := bindName(fd, s); err != nil {
			return err
		}
	}
	if s.State == StateListen {
		if err := unix.Listen(fd, max(s.Backlog, 1)); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	return nil
}

// FillUnix refills the receive queue of the unconnected socket fd made by
// OpenUnixBound, then sets its late options and shutdown state. A message
// whose sender's name sender finds among the rebuilt sockets (its fd) is
// sent from that socket, which holds the name; any other from a temporary
// socket bound to the name.
func FillUnix(fd int, s *image.Socket, queue []UnixMsg, sender func(name string) (int, bool), r Refill) error {
	if len(queue) > 0 {
		if s.Local == "" || s.Type == unix.SOCK_STREAM {
			return fmt.Errorf("queued data on an unconnected socket: %w", ErrState)
		}
		to := unixAddr(ReachName(s))
		send := func(m UnixMsg) error {
			if sender != nil && m.From != "" {
				if from, ok := sender(m.From); ok {
					return sendMsg(from, m, to, r.Hold)
				}
			}
			return sendFrom(s.Type, m, to, r.Hold)
		}
		if err := fillUnix(-1, fd, queue, send); err != nil {
			return err
		}
	}
	return r.finish(fd, s)
}

// sendFrom sends a datagram to to from a temporary socket bound to the
// original sender's name, so that recvfrom gives the same name. A path
// name taken by a socket file is moved aside while the temporary socket
// binds it.
func sendFrom(typ int, m UnixMsg, to unix.Sockaddr, hold Hold) error {
	tmpFD, err := sys.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer tmpFD.Close()
	tmp := tmpFD.Int()
	if m.From != "" {
		undo, err := bindAside(tmp, m.From)
		if err != nil {
			return fmt.Errorf("the sender's name: %w", err)
		}
		defer undo()
	}
	return sendMsg(tmp, m, to, hold)
}

// bindAside binds a temporary socket to name; a file at a path name is
// moved aside meanwhile. undo, once the socket is closed or not needed,
// removes its file and puts back what was there.
func bindAside(fd int, name string) (undo func(), err error) {
	if name[0] == '@' {
		if err := bindFreed(fd, name); err != nil {
			return nil, fmt.Errorf("bind %q: %w", name, err)
		}
		return func() {}, nil
	}
	aside := ""
	if _, err := os.Lstat(name); err == nil {
		aside = name + ".ckpt-aside-" + strconv.Itoa(os.Getpid())
		if err := os.Rename(name, aside); err != nil {
			return nil, fmt.Errorf("move %s aside: %w", name, err)
		}
	}
	back := func() {
		if aside != "" {
			os.Rename(aside, name)
		}
	}
	if err := unix.Bind(fd, unixAddr(name)); err != nil {
		back()
		return nil, fmt.Errorf("bind %s: %w", name, err)
	}
	return func() { os.Remove(name); back() }, nil
}

// Connecting says who makes a connection through a name, for the peer
// credentials each end records (SO_PEERCRED): Listen listens again on the
// listener lfd in the process whose credentials the client must see (the
// one that called listen), Connect connects fd to name from the process
// whose credentials the accepted end must see (the one that called
// connect). Nil ones are done by ckpt-redo.
type Connecting struct {
	Listen  func(lfd int) error
	Connect func(fd int, name string) error
}

func (c Connecting) listen(lfd int) error {
	if c.Listen == nil {
		return nil
	}
	return c.Listen(lfd)
}

func (c Connecting) connect(fd int, name string) error {
	if c.Connect == nil {
		return unix.Connect(fd, unixAddr(name))
	}
	return c.Connect(fd, name)
}

// ConnectUnix rebuilds a client whose connection waited in the accept
// queue of a listener lfd: a new socket with its options and name,
// connected to the rebuilt listener's name (so that the listener's queue
// holds the connection again, in the order of the calls).
func ConnectUnix(s *image.Socket, lfd int, listener string, how Connecting) (*sys.FD, error) {
	sock, err := connectUnix(s, lfd, listener, how)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	if err := finishUnix(sock.Int(), s); err != nil {
		return nil, err
	}
	return sock.Move(), nil
}

// connectUnix is ConnectUnix but for the late options and shutdown.
func connectUnix(s *image.Socket, lfd int, listener string, how Connecting) (*sys.FD, error) {
	sock, err := sys.Socket(unix.AF_UNIX, s.Type|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	fd := sock.Int()
	err = setOptions(fd, s.Options, early, nil)
	if err == nil && s.Local != "" {
		err = bindName(fd, s)
	}
	if err == nil {
		err = how.listen(lfd)
	}
	if err == nil {
		if err = how.connect(fd, listener); err != nil {
			err = fmt.Errorf("connect to the listener %s: %w", listener, err)
		}
	}
	if err != nil {
		return nil, err
	}
	return sock.Move(), nil
}

// bindUnix binds a rebuilt socket to its name; a socket file left at a
// path name by the dead process is replaced.
func bindUnix(fd int, name string) error {
	if name[0] != '@' {
		var st unix.Stat_t
		if unix.Lstat(name, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			unix.Unlink(name)
		}
	}
	if err := bindFreed(fd, name); err != nil {
		return fmt.Errorf("bind %s: %w", name, err)
	}
	return nil
}

// AcceptedPair rebuilds a connection the listener lfd (named listener)
// had accepted: a client (nil if it was closed) connects to the listener,
// the server end is accepted from it, so that both bear the same names as
// before; then their queues (qs for the server, qc for the client),
// options and shutdown state. A closed client is closed once the queue is
// refilled (by fill, which does the queues and what follows). The
// listener's queue must hold no other connection.
func AcceptedPair(lfd int, listener string, srv, cli *image.Socket, qs, qc []UnixMsg, how Connecting) (*sys.FD, *sys.FD, Fill, error) {
	ctmp := &image.Socket{Type: srv.Type}
	if cli != nil {
		ctmp = cli
	}
	client, err := sys.Socket(unix.AF_UNIX, srv.Type|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	defer client.Close()
	cfd := client.Int()
	if err := setOptions(cfd, ctmp.Options, early, nil); err != nil {
		return nil, nil, nil, err
	}
	if cli != nil && cli.Local != "" {
		if err := bindName(cfd, cli); err != nil {
			return nil, nil, nil, err
		}
	}
	if err := how.listen(lfd); err != nil {
		return nil, nil, nil, err
	}
	if err := how.connect(cfd, listener); err != nil {
		return nil, nil, nil, fmt.Errorf("connect to the listener %s: %w", listener, err)
	}
	server, err := sys.Accept4(lfd, unix.SOCK_CLOEXEC)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("accept from %s: %w", listener, err)
	}
	defer server.Close()
	sfd := server.Int()
	if err := setOptions(sfd, srv.Options, early, nil); err != nil {
		return nil, nil, nil, err
	}
	var closed *sys.FD // a closed client: fill's, closed once the queue is refilled
	if cli == nil {
		closed = client.Move()
	}
	fill := func(r Refill) error {
		defer closed.Close()
		return fillAndFinish([2]int{sfd, cfd}, [2]*image.Socket{srv, cli}, [2][]UnixMsg{qs, qc}, r)
	}
	return server.Move(), client.Move(), fill, nil
}

// ConnectDgram rebuilds a UNIX datagram socket that was connected one way
// to the named socket srv (rebuilt, its fd sfd): options and name,
// connected to it again, with its queued messages (those from the server
// sent by sfd itself, others from their senders' names) and its shutdown
// state.
func ConnectDgram(s, srv *image.Socket, sfd int, queue []UnixMsg) (*sys.FD, Fill, error) {
	sock, err := sys.Socket(unix.AF_UNIX, s.Type|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	defer sock.Close()
	fd := sock.Int()
	if err := connectDgram(fd, s, srv); err != nil {
		return nil, nil, err
	}
	return sock.Move(), func(r Refill) error { return fillDgram(fd, s, srv.Local, sfd, queue, r) }, nil
}

func connectDgram(fd int, s, srv *image.Socket) error {
	server := srv.Local
	if err := setOptions(fd, s.Options, early, nil); err != nil {
		return err
	}
	if s.Local != "" {
		if err := bindName(fd, s); err != nil {
			return err
		}
	}
	if err := unix.Connect(fd, unixAddr(ReachName(srv))); err != nil {
		return fmt.Errorf("connect to %s: %w", server, err)
	}
	return nil
}

func fillDgram(fd int, s *image.Socket, server string, sfd int, queue []UnixMsg, r Refill) error {
	if len(queue) > 0 {
		if s.Local == "" {
			return fmt.Errorf("messages queued on an unnamed datagram socket: %w", ErrState)
		}
		to := unixAddr(ReachName(s))
		err := fillUnix(-1, fd, queue, func(m UnixMsg) error {
			if m.From == server {
				return sendMsg(sfd, m, to, r.Hold)
			}
			return sendFrom(s.Type, m, to, r.Hold)
		})
		if err != nil {
			return err
		}
	}
	return r.finish(fd, s)
}

// absName is a path name as absolute (the temporary listener bound it
// relative to ckpt-redo's directory, and another process may connect).
func absName(name string) string {
	if name == "" || name[0] == '@' || filepath.IsAbs(name) {
		return name
	}
	if wd, err := os.Getwd(); err == nil {
		return filepath.Join(wd, name)
	}
	return name
}

// connectedTo says whether a socket of all is connected to ino.
func connectedTo(all map[uint32]UnixInfo, ino uint32) bool {
	for _, o := range all {
		if o.Peer == ino {
			return true
		}
	}
	return false
}

// namedPair rebuilds a connected pair one end of which has a name, so that
// getsockname and getpeername read the same: datagram sockets (both then
// named) are bound and connected to each other; a stream or seqpacket
// connection is made through a temporary listener on the name of the end
// that was accepted (its listener is gone), the other end connecting to
// it from its own name, if any.
func namedPair(a, b *image.Socket, qa, qb []UnixMsg, how Connecting) (*sys.FD, *sys.FD, Fill, error) {
	var ends [2]*sys.FD // closed on error, released on success
	defer func() {
		ends[0].Close()
		ends[1].Close()
	}()
	if a.Type == unix.SOCK_DGRAM {
		if a.Local == "" || b.Local == "" {
			return nil, nil, nil, fmt.Errorf("a datagram pair with one name: %w", ErrState)
		}
		for i, s := range []*image.Socket{a, b} {
			end, err := sys.Socket(unix.AF_UNIX, s.Type|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return nil, nil, nil, err
			}
			ends[i] = end
			if err := setOptions(end.Int(), s.Options, early, nil); err != nil {
				return nil, nil, nil, err
			}
			if err := bindName(end.Int(), s); err != nil {
				return nil, nil, nil, err
			}
		}
		for i, to := range []string{ReachName(b), ReachName(a)} {
			if err := unix.Connect(ends[i].Int(), unixAddr(to)); err != nil {
				return nil, nil, nil, fmt.Errorf("connect to %s: %w", to, err)
			}
		}
	} else {
		srv, cli := 0, 1 // the accepted end bears the listener's name
		if a.Local == "" {
			srv, cli = 1, 0
		}
		ss := [2]*image.Socket{a, b}
		listener, err := sys.Socket(unix.AF_UNIX, a.Type|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, nil, nil, err
		}
		defer listener.Close()
		l := listener.Int()
		undo, err := bindAside(l, ss[srv].Local)
		if err != nil {
			return nil, nil, nil, err
		}
		defer undo()
		if err := unix.Listen(l, 1); err != nil {
			return nil, nil, nil, fmt.Errorf("listen: %w", err)
		}
		if err := how.listen(l); err != nil {
			return nil, nil, nil, err
		}
		if ends[cli], err = sys.Socket(unix.AF_UNIX, a.Type|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0); err != nil {
			return nil, nil, nil, err
		}
		if err := setOptions(ends[cli].Int(), ss[cli].Options, early, nil); err != nil {
			return nil, nil, nil, err
		}
		if ss[cli].Local != "" {
			if err := bindName(ends[cli].Int(), ss[cli]); err != nil {
				return nil, nil, nil, err
			}
		}
		if err := how.connect(ends[cli].Int(), absName(ss[srv].Local)); err != nil {
			return nil, nil, nil, fmt.Errorf("connect to %s: %w", ss[srv].Local, err)
		}
		if ends[srv], err = sys.Accept4(l, unix.SOCK_CLOEXEC); err != nil {
			return nil, nil, nil, err
		}
		if err := setOptions(ends[srv].Int(), ss[srv].Options, early, nil); err != nil {
			return nil, nil, nil, err
		}
	}
	fds := [2]int{ends[0].Int(), ends[1].Int()}
	return ends[0].Move(), ends[1].Move(), func(r Refill) error {
		return fillAndFinish(fds, [2]*image.Socket{a, b}, [2][]UnixMsg{qa, qb}, r)
	}, nil
}

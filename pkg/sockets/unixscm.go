package sockets

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// Messages queued in a UNIX socket carry more than bytes: the files in
// flight attached to them (SCM_RIGHTS) and the credentials of their
// sender (SCM_CREDENTIALS, which a receiver sees once it sets
// SO_PASSCRED). The dump peeks them (the files in flight are then
// installed in ckpt's fd table), the restore sends them again with both.

// Hold runs fn while a process holds the PID pid (at restore, a
// short-lived helper), so that a message may be sent with credentials
// naming a process that no longer exists.
type Hold func(pid int, fn func() error) error

// Fill refills the queues of UNIX sockets already made and sets what
// comes after (late options, shutdown). It runs once every process of
// the tree exists: credentials name them.
type Fill func(r Refill) error

// Refill is what a Fill is given. Hold, if not nil, sends as a PID that
// no longer exists. Later, if not nil, takes the finishing steps of
// datagram sockets (late options, shutdown) to run once every queue is
// filled: a datagram queued on an unconnected socket goes again from its
// sender's rebuilt socket, which must not be shut down for sending yet
// (nil: they run at once).
type Refill struct {
	Hold  Hold
	Later func(step func() error)
}

// finish sets the late options and shutdown state of a socket whose
// queue is filled: at once, or later for a datagram socket.
func (r Refill) finish(fd int, s *image.Socket) error {
	if r.Later != nil && s.Type == unix.SOCK_DGRAM {
		r.Later(func() error { return finishUnix(fd, s) })
		return nil
	}
	return finishUnix(fd, s)
}

// CloseRights closes ckpt's copies of the files in flight of msgs (those
// peekUnix installed); again, or on messages made at the restore, it does
// nothing.
func CloseRights(msgs []UnixMsg) {
	for _, m := range msgs {
		for _, fd := range m.held {
			fd.Close()
		}
	}
}

// oobSize holds every control message a peek may get: SCM_MAX_FD files,
// credentials and a pidfd (SO_PASSPIDFD).
var oobSize = unix.CmsgSpace(253*4) + unix.CmsgSpace(unix.SizeofUcred) + unix.CmsgSpace(4)

// peekUnix reads the receive queue of a UNIX socket without consuming it:
// datagram or seqpacket messages one by one with their senders, a
// stream's bytes as few messages as keep what a reader can observe: a
// new one where the credentials change, where a piece files are attached
// to starts and after it. A peek of a stream reads up to the end of the
// piece that has files, and cannot tell where that piece starts: bytes
// sent before it with the same credentials come back in one peek with it;
// pieces (the kernel's queue of the socket ino) tells, cutPieces cuts
// them off (without it such a peek is refused, ErrPieceStart). Every
// message has its credentials and its files in flight (ckpt's fds: the
// caller closes them, CloseRights). It never blocks, using SO_PEEK_OFF;
// SO_PASSCRED is on while it reads: every message then carries
// credentials, which also tells an empty message from the end of a shut
// down seqpacket queue. The program's SO_PEEK_OFF and SO_PASSCRED are put
// back. With limit >= 0 it stops after that many bytes (a peek past the
// data would take a pending error; empty seqpacket messages at the end
// are then not seen).
func peekUnix(fd int, ino uint32, typ, limit int, pieces Pieces) (out []UnixMsg, err error) {
	for _, o := range []struct{ name, val int }{{unix.SO_PEEK_OFF, 0}, {unix.SO_PASSCRED, 1}} {
		old, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, o.name)
		if err != nil {
			return nil, fmt.Errorf("getsockopt %d: %w", o.name, err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.name, o.val); err != nil {
			return nil, fmt.Errorf("setsockopt %d: %w", o.name, err)
		}
		defer unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.name, old)
	}
	defer func() {
		if err != nil {
			CloseRights(out)
			out = nil
		}
	}()
	buf := make([]byte, maxUnixMsg)
	oob := make([]byte, oobSize)
	for total := 0; limit < 0 || total < limit; {
		size := len(buf)
		if limit >= 0 && typ == unix.SOCK_STREAM {
			size = min(size, limit-total)
		}
		n, cm, flags, from, err := peekOne(fd, buf[:size], oob)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("peek the queue: %w", err)
		}
		m := UnixMsg{Rights: cm.rights, held: cm.held, Cred: cm.cred}
		if m.Cred != nil && m.Cred.Pid == 0 {
			// Sent while neither end asked for credentials: the
			// message has none (the kernel says pid 0, overflow ids).
			m.Cred = nil
		}
		if flags&unix.MSG_TRUNC != 0 {
			CloseRights([]UnixMsg{m})
			return out, fmt.Errorf("a queued message larger than %d bytes: %w", maxUnixMsg, ErrState)
		}
		if n == 0 && (typ == unix.SOCK_STREAM || cm.cred == nil) {
			CloseRights([]UnixMsg{m})
			break // end of a shut down queue
		}
		m.Data = append([]byte(nil), buf[:n]...)
		if typ == unix.SOCK_DGRAM {
			m.From = unixName(from)
		}
		if typ == unix.SOCK_STREAM {
			out = appendStream(out, m)
		} else {
			out = append(out, m)
		}
		total += n
	}
	if typ == unix.SOCK_STREAM {
		cut, err := cutPieces(ino, out, pieces)
		if err != nil {
			return out, err
		}
		out = cut
	}
	return out, nil
}

// appendStream adds bytes of a stream to the messages read: glued to the
// last one when a reader could not tell them apart (same credentials,
// neither with files).
func appendStream(out []UnixMsg, m UnixMsg) []UnixMsg {
	if k := len(out) - 1; k >= 0 && len(out[k].Rights) == 0 && len(m.Rights) == 0 && sameCred(out[k].Cred, m.Cred) {
		out[k].Data = append(out[k].Data, m.Data...)
		return out
	}
	return append(out, m)
}

func sameCred(a, b *unix.Ucred) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// control is what a peeked message's control messages said.
type control struct {
	rights []int
	held   []*sys.FD // owns rights
	cred   *unix.Ucred
}

// peekOne peeks one message (or piece of a stream) with its control
// messages and its sender's address as raw bytes (unixName); a pidfd
// (SO_PASSPIDFD) is closed, files in flight kept.
func peekOne(fd int, buf, oob []byte) (int, control, int, []byte, error) {
	var c control
	n, oobn, flags, from, err := sys.RecvmsgName(fd, buf, oob, unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return 0, c, 0, nil, err
	}
	cmsgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range cmsgs {
		if m.Header.Level != unix.SOL_SOCKET {
			continue
		}
		switch m.Header.Type {
		case unix.SCM_CREDENTIALS:
			if uc, err := unix.ParseUnixCredentials(&m); err == nil {
				c.cred = uc
			}
		case unix.SCM_RIGHTS:
			if fds, err := unix.ParseUnixRights(&m); err == nil {
				for _, f := range fds {
					if own, err := sys.NewFD(f); err == nil {
						c.rights, c.held = append(c.rights, f), append(c.held, own)
					}
				}
			}
		case 0x04: // SCM_PIDFD: not kept
			if fds, err := unix.ParseUnixRights(&m); err == nil {
				for _, f := range fds {
					pidfd, _ := sys.NewFD(f)
					pidfd.Close()
				}
			}
		}
	}
	if perr != nil || flags&unix.MSG_CTRUNC != 0 {
		CloseRights([]UnixMsg{{held: c.held}})
		return 0, control{}, 0, nil, fmt.Errorf("control messages of a queued message cut short: %w", ErrState)
	}
	return n, c, flags, from, nil
}

// PeekUnix reads the queue of the UNIX socket fd (ckpt's copy, inode
// ino) of type typ without consuming it, as DescribeUnix does (it stops
// before a pending error; a stream's pieces with files are found with
// pieces): messages with their credentials and files in flight (ckpt's
// copies: CloseRights). A message is peeked only once: a second peek no
// longer sees an empty seqpacket message (the kernel skips an empty
// message it has given a peek), so the dump keeps what it read first and
// hands it to DescribeUnix.
func PeekUnix(fd int, ino uint32, typ int, pieces Pieces) ([]UnixMsg, error) {
	limit := -1
	if typ != unix.SOCK_DGRAM && pendingError(fd) {
		n, err := sys.IoctlInt(fd, unix.SIOCINQ)
		if err != nil {
			return nil, err
		}
		limit = n
	}
	return peekUnix(fd, ino, typ, limit, pieces)
}

// sendMsg sends a queued message again from fd (to its peer, or to to):
// its bytes, its files in flight and its sender's credentials. A sender
// whose PID no longer exists is held by hold while the message goes. The
// sending socket's SO_PASSCRED and SO_PASSPIDFD are off meanwhile: a
// message without credentials gets none, and an unnamed datagram socket
// is not bound by the send.
func sendMsg(fd int, m UnixMsg, to unix.Sockaddr, hold Hold) error {
	undo, err := credsOff(fd)
	if err != nil {
		return err
	}
	defer undo()
	err = sendWith(fd, m, to)
	if errors.Is(err, unix.ESRCH) && m.Cred != nil && hold != nil {
		err = hold(int(m.Cred.Pid), func() error { return sendWith(fd, m, to) })
	}
	if err != nil && m.Cred != nil {
		return fmt.Errorf("send %d bytes as process %d (uid %d gid %d): %w", len(m.Data), m.Cred.Pid, m.Cred.Uid, m.Cred.Gid, err)
	}
	return err
}

// sendWith sends without blocking; files go with the first bytes only,
// credentials with every part.
func sendWith(fd int, m UnixMsg, to unix.Sockaddr) error {
	b, rights := m.Data, m.Rights
	for {
		var oob []byte
		if len(rights) > 0 {
			oob = unix.UnixRights(rights...)
		}
		if m.Cred != nil {
			oob = append(oob, unix.UnixCredentials(m.Cred)...)
		}
		if len(b) == 0 && len(oob) > 0 && to == nil {
			// An empty seqpacket message (SendmsgN would add a byte).
			return sendEmpty(fd, oob, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		}
		n, err := unix.SendmsgN(fd, b, oob, to, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if to != nil || n == len(b) {
			return nil
		}
		b, rights = b[n:], nil
	}
}

// credsOff turns SO_PASSCRED and SO_PASSPIDFD off on a socket being
// refilled or sending; undo puts them back.
func credsOff(fd int) (undo func(), err error) {
	var back []int
	for _, o := range []int{unix.SO_PASSCRED, unix.SO_PASSPIDFD} {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, o)
		if err != nil || v == 0 {
			continue // SO_PASSPIDFD: unknown to older kernels
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o, 0); err != nil {
			return nil, fmt.Errorf("setsockopt %d: %w", o, err)
		}
		back = append(back, o)
	}
	return func() {
		for _, o := range back {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, o, 1)
		}
	}, nil
}

// unixName is the name in a struct sockaddr_un of the length the kernel
// gave (recvmsg's msg_namelen), as sock_diag's names are written: "" for
// none, "@" and every byte after the leading NUL for an abstract name
// (NULs included: "\x00\x00" is "@\x00", not "@"), a path up to its NUL.
func unixName(raw []byte) string {
	const off = 2 // sun_family
	if len(raw) <= off {
		return ""
	}
	path := raw[off:]
	if path[0] == 0 {
		return "@" + string(path[1:])
	}
	if i := bytes.IndexByte(path, 0); i >= 0 {
		path = path[:i]
	}
	return string(path)
}

// gcWait is how long bindFreed waits for the kernel to free the sockets
// in flight that hold an abstract name.
const gcWait = 2 * time.Second

// bindFreed binds fd to name. An abstract name may still be held by
// sockets of a process that is gone (the dump killed it) when they were
// in flight in each other's queues (a socket in its own queue, two in
// each other's: zdtm scm06): such a cycle is freed only by the kernel's
// garbage collector of UNIX sockets, which runs apart (a work queue) once
// some UNIX socket is released while files are in flight. On EADDRINUSE
// for an abstract name bindFreed releases a socket of its own to start a
// collection, and binds again until gcWait has passed; a name a live
// socket holds is then an error as before.
func bindFreed(fd int, name string) error { return bindFreedWithin(fd, name, gcWait) }

func bindFreedWithin(fd int, name string, wait time.Duration) error {
	sa := unixAddr(name)
	err := unix.Bind(fd, sa)
	if !errors.Is(err, unix.EADDRINUSE) || name[0] != '@' {
		return err
	}
	deadline := time.Now().Add(wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		collectUnixGarbage()
		time.Sleep(pause)
		err = unix.Bind(fd, sa)
		if !errors.Is(err, unix.EADDRINUSE) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (still held %v later, by a socket that is not garbage in flight)", err, wait)
		}
	}
}

// collectUnixGarbage starts the kernel's garbage collector of UNIX
// sockets: releasing one while files are in flight does (unix_release_sock).
func collectUnixGarbage() {
	if fd, err := sys.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		fd.Close()
	}
}

// BindPairNames binds the ends of a datagram pair made by socketpair that
// had names (s nil or without a name: left unnamed), as the program did:
// a pair made, then bound (its SO_PEERCRED is the maker's, which a pair
// connected through names would not have).
func BindPairNames(fds [2]int, a, b *image.Socket) error {
	for i, s := range []*image.Socket{a, b} {
		if s == nil || s.Local == "" {
			continue
		}
		if err := bindName(fds[i], s); err != nil {
			return err
		}
	}
	return nil
}

package sockets

import (
	"fmt"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// ConnectUnixSent rebuilds a client whose connection waited in the accept
// queue of a listener lfd with data it had sent: connected now (so that
// the listener's queue holds the connections in the order of the
// calls); fill sends the pieces msgs again, each as one send with its
// credentials, into the new connection, then sets the late options and
// shutdown state.
func ConnectUnixSent(s *image.Socket, lfd int, listener string, how Connecting, msgs []UnixMsg) (*sys.FD, Fill, error) {
	sock, err := connectUnix(s, lfd, listener, how)
	if err != nil {
		return nil, nil, err
	}
	fd := sock.Int()
	return sock, func(r Refill) error {
		if err := sendWaiting(fd, msgs, r.Hold); err != nil {
			return fmt.Errorf("the data sent into its connection waiting in the accept queue of %s: %w", listener, err)
		}
		return finishUnix(fd, s)
	}, nil
}

// ConnectUnixClosed rebuilds a connection waiting in the accept queue of
// a listener lfd whose client was closed: a temporary socket of type typ,
// bound to the client's name if it had one (a path name taken by a file
// is moved aside meanwhile), connects now (how says from which process:
// the accepted end's SO_PEERCRED names it); fill sends the pieces msgs
// again, each as one send with its credentials, then closes it and
// removes its name.
func ConnectUnixClosed(typ int, name string, lfd int, listener string, how Connecting, msgs []UnixMsg) (Fill, error) {
	sock, err := sys.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	undo := func() {}
	if name != "" {
		if undo, err = bindAside(sock.Int(), name); err != nil {
			sock.Close()
			return nil, fmt.Errorf("the closed client's name: %w", err)
		}
	}
	if err := how.connect(sock.Int(), listener); err != nil {
		sock.Close()
		undo()
		return nil, fmt.Errorf("connect to the listener %s: %w", listener, err)
	}
	return func(r Refill) error {
		defer undo()
		defer sock.Close()
		if err := sendWaiting(sock.Int(), msgs, r.Hold); err != nil {
			return fmt.Errorf("the data sent into a connection waiting in the accept queue of %s by a client closed since: %w", listener, err)
		}
		return nil
	}, nil
}

// sendWaiting sends msgs from fd, each piece as one send (its buffer
// raised so that none blocks or is cut).
func sendWaiting(fd int, msgs []UnixMsg, hold Hold) error {
	total := 0
	for _, m := range msgs {
		total += len(m.Data) + 1024
	}
	if total == 0 {
		return nil
	}
	if err := raiseBuffers(fd, total, 0); err != nil {
		return err
	}
	for _, m := range msgs {
		if err := sendMsg(fd, m, nil, hold); err != nil {
			return err
		}
	}
	return nil
}

// sendEmpty sends a message without bytes and with the control messages
// oob on the connected socket fd: unix.SendmsgN would send one byte
// instead (for a stream, which cannot carry control messages alone).
func sendEmpty(fd int, oob []byte, flags int) error {
	var msg unix.Msghdr
	msg.Control = &oob[0]
	msg.SetControllen(len(oob))
	for {
		_, _, e := unix.Syscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

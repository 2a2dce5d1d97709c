package sockets

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// kindOf is the On bit of a socket.
func kindOf(family, proto int) int {
	switch {
	case family == unix.AF_UNIX:
		return onUnix
	case proto == unix.IPPROTO_TCP, proto == unix.IPPROTO_MPTCP:
		return onTCP
	}
	return onUDP
}

// applies says whether a row is read on a socket.
func (o *Option) applies(family, proto int, established bool) bool {
	if o.On&kindOf(family, proto) == 0 {
		return false
	}
	if o.Level == unix.IPPROTO_IPV6 && family != unix.AF_INET6 {
		return false
	}
	return !(o.Unconnected && established)
}

// notApplicable are the errors getsockopt gives for an option a socket
// does not have: a program cannot observe it either.
func notApplicable(err error) bool {
	return errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ENOENT)
}

// readRow reads one option; ok is false when the socket has no such option.
func readRow(fd int, o *Option) (v image.SockOpt, ok bool, err error) {
	v = image.SockOpt{Level: o.Level, Name: o.Name}
	switch o.How {
	case Int, Buffer:
		v.Value, err = unix.GetsockoptInt(fd, o.Level, o.Name)
	case Bytes:
		buf := make([]byte, o.Size)
		var l int
		if l, err = sys.Getsockopt(fd, o.Level, o.Name, unsafe.Pointer(&buf[0]), uintptr(len(buf))); err == nil {
			v.Bytes = buf[:l]
		}
	case Filter:
		v.Bytes, err = readFilter(fd)
	default:
		return v, false, nil
	}
	if err != nil {
		if notApplicable(err) {
			return v, false, nil
		}
		return v, false, fmt.Errorf("getsockopt %s: %w", o.Label, err)
	}
	return v, true, nil
}

// readFilter reads a classic BPF socket filter (8 bytes an instruction);
// nil without one.
func readFilter(fd int) ([]byte, error) {
	// With no buffer, the kernel says how many instructions there are.
	l, err := sys.Getsockopt(fd, unix.SOL_SOCKET, unix.SO_GET_FILTER, nil, 0)
	if errors.Is(err, unix.EACCES) {
		return nil, fmt.Errorf("an eBPF socket filter (SO_ATTACH_BPF) cannot be read back: %w", ErrState)
	}
	if err != nil {
		return nil, err
	}
	if l == 0 {
		return nil, nil
	}
	buf := make([]byte, 8*l)
	n, err := sys.Getsockopt(fd, unix.SOL_SOCKET, unix.SO_GET_FILTER, unsafe.Pointer(&buf[0]), uintptr(l))
	if err != nil {
		return nil, err
	}
	return buf[:8*n], nil
}

// ReadOptions reads the options of the inventory that a socket (one of
// ckpt's fds) has and a new socket of the same family, type and protocol
// has not. It refuses (ErrState, naming the option) what cannot be read
// back: an eBPF filter, an upper layer protocol (kTLS), TCP-AO keys, a
// pending error or error queue.
func ReadOptions(fd, family, typ, proto int, established bool) ([]image.SockOpt, error) {
	return readOptions(fd, family, typ, proto, established, false, nil)
}

// Defaults are what Describe compares every socket with: the option
// values of new sockets, by family, type and protocol, read from one new
// socket of each kind instead of one a socket described, and which
// addresses are the machine's (nonLocal). They are those of ckpt's
// network namespace and sysctls at the time: one Defaults serves one
// dump. Safe for concurrent use; the zero value is ready.
type Defaults struct {
	mu    sync.Mutex
	kinds map[[3]int][]defaultRow
	local map[netip.Addr]bool // address (v4-mapped as such) -> nonLocal
}

// nonLocal is nonLocal, kept (nil d: asked now).
func (d *Defaults) nonLocal(family int, addr netip.Addr) bool {
	if d == nil {
		return nonLocal(family, addr)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.local[addr]; ok {
		return v
	}
	v := nonLocal(family, addr)
	if d.local == nil {
		d.local = map[netip.Addr]bool{}
	}
	d.local[addr] = v
	return v
}

// defaultRow is a new socket's value of the inventory row of that index.
type defaultRow struct {
	v  image.SockOpt
	ok bool
}

// of gives a new socket's values of every row that applies to the kind
// (nil d: read now, not kept).
func (d *Defaults) of(family, typ, proto int) ([]defaultRow, error) {
	key := [3]int{family, typ, proto}
	if d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		if rows, ok := d.kinds[key]; ok {
			return rows, nil
		}
	}
	freshFD, err := sys.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("new socket for the defaults: %w", err)
	}
	defer freshFD.Close()
	rows := make([]defaultRow, len(Options))
	for i := range Options {
		o := &Options[i]
		if !o.applies(family, proto, false) {
			continue
		}
		rows[i].v, rows[i].ok, _ = readRow(freshFD.Int(), o)
	}
	if d != nil {
		if d.kinds == nil {
			d.kinds = map[[3]int][]defaultRow{}
		}
		d.kinds[key] = rows
	}
	return rows, nil
}

// readOptions is ReadOptions; errOK lets a pending error through (the
// caller restores it); defs keeps the defaults of new sockets (nil: read
// from a new socket).
func readOptions(fd, family, typ, proto int, established, errOK bool, defs *Defaults) ([]image.SockOpt, error) {
	if !errOK && pendingError(fd) {
		return nil, fmt.Errorf("a pending socket error or error queue (SO_ERROR, MSG_ERRQUEUE, MSG_ZEROCOPY completions) cannot be restored: %w", ErrState)
	}
	if urgentData(fd) {
		return nil, fmt.Errorf("urgent data (MSG_OOB) pending in the receive queue cannot be restored: %w", ErrState)
	}
	if err := refuseOptions(fd, proto); err != nil {
		return nil, err
	}
	fresh, err := defs.of(family, typ, proto)
	if err != nil {
		return nil, err
	}
	var out []image.SockOpt
	for i := range Options {
		o := &Options[i]
		if !o.applies(family, proto, established) {
			continue
		}
		v, ok, err := readRow(fd, o)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if def := fresh[i]; def.ok && def.v.Value == v.Value && bytes.Equal(def.v.Bytes, v.Bytes) {
			continue
		}
		out = append(out, v)
	}
	return out, nil
}

// refuseOptions refuses a socket with state that cannot be read back.
func refuseOptions(fd, proto int) error {
	if proto == unix.IPPROTO_TCP {
		ulp := make([]byte, 16)
		l, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_ULP, unsafe.Pointer(&ulp[0]), uintptr(len(ulp)))
		if name := string(bytes.TrimRight(ulp[:l], "\x00")); err == nil && name != "" {
			return fmt.Errorf("TCP upper layer protocol %q (TCP_ULP, kTLS) cannot be read back: %w", name, ErrState)
		}
		ao := make([]byte, 64)
		if _, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, tcpAOInfo, unsafe.Pointer(&ao[0]), uintptr(len(ao))); err == nil {
			return fmt.Errorf("TCP-AO keys (TCP_AO_ADD_KEY) cannot be read back: %w", ErrState)
		}
	}
	if proto == unix.IPPROTO_UDP {
		cork, _ := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_CORK)
		if out, err := sys.IoctlInt(fd, unix.SIOCOUTQ); err == nil && out > 0 && cork != 0 {
			return fmt.Errorf("corked UDP data not sent yet (UDP_CORK) cannot be read back: %w", ErrState)
		}
	}
	return nil
}

// phase is when options are set: before bind, or once connected.
type phase int

const (
	early phase = iota // after socket(), before bind
	late               // connected, queues filled
)

// setOptions sets the saved options of a phase, in the inventory's order.
// skip names options left out (SO_REUSEADDR of a connection in repair
// mode, set when it leaves). Setting a buffer locks it; SO_BUF_LOCK is
// always set after the buffers, to its saved value or 0.
func setOptions(fd int, saved []image.SockOpt, p phase, skip func(level, name int) bool) error {
	byKey := map[[2]int]image.SockOpt{}
	for _, v := range saved {
		byKey[[2]int{v.Level, v.Name}] = v
	}
	buffers := false
	for i := range Options {
		o := &Options[i]
		if o.Late != (p == late) {
			continue
		}
		v, ok := byKey[[2]int{o.Level, o.Name}]
		if o.Level == unix.SOL_SOCKET && o.Name == unix.SO_BUF_LOCK && buffers && !ok {
			v, ok = image.SockOpt{Level: o.Level, Name: o.Name}, true
		}
		if !ok || skip != nil && skip(o.Level, o.Name) {
			continue
		}
		if err := setRow(fd, o, v); err != nil {
			return err
		}
		buffers = buffers || o.How == Buffer
	}
	return nil
}

func setRow(fd int, o *Option, v image.SockOpt) error {
	var err error
	switch o.How {
	case Int:
		val := v.Value
		if o.Level == unix.SOL_SOCKET && o.Name == unix.SO_TXREHASH && val == 255 {
			val = -1
		}
		err = unix.SetsockoptInt(fd, o.Level, o.Name, val)
	case Buffer:
		name := unix.SO_SNDBUFFORCE
		if o.Name == unix.SO_RCVBUF {
			name = unix.SO_RCVBUFFORCE
		}
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, name, v.Value/2)
	case Bytes:
		if len(v.Bytes) == 0 {
			err = sys.Setsockopt(fd, o.Level, o.Name, nil, 0)
		} else {
			err = sys.Setsockopt(fd, o.Level, o.Name, unsafe.Pointer(&v.Bytes[0]), uintptr(len(v.Bytes)))
		}
	case Filter:
		if len(v.Bytes) == 0 {
			return nil
		}
		prog := unix.SockFprog{Len: uint16(len(v.Bytes) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&v.Bytes[0]))}
		err = sys.Setsockopt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, unsafe.Pointer(&prog), unsafe.Sizeof(prog))
	}
	if err != nil {
		return fmt.Errorf("setsockopt %s: %w", o.Label, err)
	}
	return nil
}

// raiseBuffers makes a socket's buffers large enough for queues of the
// given sizes (filling them must not block); the saved sizes are set
// afterwards.
func raiseBuffers(fd, send, recv int) error {
	for _, b := range []struct{ get, force, need int }{
		{unix.SO_SNDBUF, unix.SO_SNDBUFFORCE, send}, {unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, recv},
	} {
		cur, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, b.get)
		if err != nil {
			return fmt.Errorf("buffer size: %w", err)
		}
		want := 2*b.need + 1<<20
		if b.need == 0 || cur >= want {
			continue
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, b.force, want); err != nil {
			return fmt.Errorf("raise buffer: %w", err)
		}
	}
	return nil
}

// bufferSizes reads SO_SNDBUF, SO_RCVBUF and SO_BUF_LOCK, to be set back
// after raiseBuffers.
func bufferSizes(fd int) []image.SockOpt {
	var out []image.SockOpt
	for _, n := range []int{unix.SO_SNDBUF, unix.SO_RCVBUF, unix.SO_BUF_LOCK} {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, n)
		if err == nil {
			out = append(out, image.SockOpt{Level: unix.SOL_SOCKET, Name: n, Value: v})
		}
	}
	return out
}

// pendingError says whether a socket has a pending error or a non-empty
// error queue (POLLERR), which reading SO_ERROR would clear.
func pendingError(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: 0}}
	_, err := unix.Poll(pfd, 0)
	return err == nil && pfd[0].Revents&unix.POLLERR != 0
}

// urgentData says whether urgent data (MSG_OOB: TCP, UNIX stream) waits to
// be read: poll gives POLLPRI.
func urgentData(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
	_, err := unix.Poll(pfd, 0)
	return err == nil && pfd[0].Revents&unix.POLLPRI != 0
}

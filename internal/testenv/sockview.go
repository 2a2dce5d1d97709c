package testenv

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// SocketView is what a process tree's socket and epoll fds are, as a
// program or `ss` sees them, keyed by "PID fd N": what an MPI library's
// progress engine would notice if a restore changed it.
type SocketView map[string]SocketFD

// SocketFD is one socket fd of a SocketView.
type SocketFD struct {
	Ino uint64 // the socket's inode (a restore makes new sockets: new inodes)
	// Desc says what the socket is without inode numbers, so that it can be
	// compared across a restore: family, state and endpoints (the TCP or
	// UDP 4-tuple, the UNIX name), the fds sharing the socket ("sock"
	// names the first fd of the tree holding it), the fd's status flags
	// (O_NONBLOCK...), for a UNIX socket which fd of the tree holds its
	// peer, for a TCP one its options TCP_NODELAY, SO_KEEPALIVE and the
	// keepalive times (read through a pidfd_getfd copy). An epoll fd is
	// described by its registrations (target fd and data; not the event
	// mask, which a program changes as it goes).
	Desc string
}

// inetSock is a line of /proc/PID/net/{tcp,tcp6,udp,udp6}.
type inetSock struct{ proto, state, local, remote string }

var tcpStates = map[string]string{"01": "ESTAB", "02": "SYN-SENT", "03": "SYN-RECV", "04": "FIN-WAIT-1",
	"05": "FIN-WAIT-2", "06": "TIME-WAIT", "07": "CLOSE", "08": "CLOSE-WAIT", "09": "LAST-ACK", "0A": "LISTEN", "0B": "CLOSING"}

// readInet parses the inet socket tables of pid's network namespace.
func readInet(pid int) (map[uint64]inetSock, error) {
	out := map[uint64]inetSock{}
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, proto))
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) < 10 {
				continue
			}
			ino, err := strconv.ParseUint(f[9], 10, 64)
			if err != nil || ino == 0 {
				continue
			}
			st := f[3]
			if strings.HasPrefix(proto, "tcp") {
				st = tcpStates[st]
			}
			out[ino] = inetSock{proto: strings.TrimSuffix(proto, "6"), state: st, local: hexAddr(f[1]), remote: hexAddr(f[2])}
		}
	}
	return out, nil
}

// hexAddr decodes /proc/net/tcp's "0100007F:1F90" (IPv4 or IPv6, each
// 32-bit word in host order).
func hexAddr(s string) string {
	host, port, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(host)
	p, err2 := strconv.ParseUint(port, 16, 16)
	if !ok || err != nil || err2 != nil || (len(b) != 4 && len(b) != 16) {
		return s
	}
	for i := 0; i < len(b); i += 4 {
		binary.BigEndian.PutUint32(b[i:], binary.LittleEndian.Uint32(b[i:]))
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a, uint16(p)).String()
}

// Sockets returns the socket fds of pids (threads share their process's
// fds). UNIX peers are found with sock_diag in the caller's network
// namespace, which must be the processes' one.
func Sockets(pids []int) (SocketView, error) {
	held := map[uint64][]string{} // inode -> keys holding it
	keys := map[string]uint64{}
	inet := map[uint64]inetSock{}
	for _, pid := range pids {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
		for _, ent := range ents {
			l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), ent.Name()))
			rest, ok := strings.CutPrefix(l, "socket:[")
			if err != nil || !ok {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("pid %d fd %s: %q", pid, ent.Name(), l)
			}
			k := fmt.Sprintf("%d fd %s", pid, ent.Name())
			keys[k] = ino
			held[ino] = append(held[ino], k)
		}
		in, err := readInet(pid)
		if err != nil {
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
		for ino, s := range in {
			inet[ino] = s
		}
	}
	first := func(ino uint64) string {
		ks := held[ino]
		if len(ks) == 0 {
			return "outside"
		}
		return slices.MinFunc(ks, func(a, b string) int { return strings.Compare(a, b) })
	}
	ux, err := sockets.UnixSockets()
	if err != nil {
		return nil, err
	}
	view := SocketView{}
	for k, ino := range keys {
		var pid, fd int
		fmt.Sscanf(k, "%d fd %d", &pid, &fd)
		flags, _, err := fdinfo(pid, fd)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		desc := "other"
		if s, ok := inet[ino]; ok {
			desc = fmt.Sprintf("%s %s %s %s", s.proto, s.state, s.local, s.remote)
			if s.proto == "tcp" {
				o, err := tcpOptions(pid, fd)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", k, err)
				}
				desc += " " + o
			}
		} else if u, ok := ux[uint32(ino)]; ok {
			peer := "none"
			if u.Peer != 0 {
				peer = first(uint64(u.Peer))
			}
			desc = fmt.Sprintf("unix type=%d state=%d name=%q peer=%q", u.Type, u.State, u.Name, peer)
		}
		view[k] = SocketFD{Ino: ino, Desc: fmt.Sprintf("%s flags=%s sock=%q", desc, flags, first(ino))}
	}
	for _, pid := range pids {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, ent := range ents {
			l, _ := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), ent.Name()))
			if l != "anon_inode:[eventpoll]" {
				continue
			}
			fd, _ := strconv.Atoi(ent.Name())
			flags, regs, err := fdinfo(pid, fd)
			if err != nil {
				return nil, fmt.Errorf("pid %d fd %d: %w", pid, fd, err)
			}
			view[fmt.Sprintf("%d fd %d", pid, fd)] = SocketFD{Desc: fmt.Sprintf("epoll flags=%s %s", flags, strings.Join(regs, " "))}
		}
	}
	return view, nil
}

// fdinfo reads /proc/PID/fdinfo/FD: the status flags, and for an epoll fd
// its registrations as "tfd=N/data=X", sorted.
func fdinfo(pid, fd int) (flags string, regs []string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		return "", nil, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "flags:":
			flags = f[1]
		case len(f) >= 6 && f[0] == "tfd:" && f[4] == "data:":
			regs = append(regs, fmt.Sprintf("tfd=%s/data=%s", f[1], f[5]))
		}
	}
	slices.Sort(regs)
	return flags, regs, nil
}

// tcpOptions reads the options of a TCP socket that a program sets and an
// MPI library relies on, through a copy of the fd (pidfd_getfd).
func tcpOptions(pid, fd int) (string, error) {
	pfd, err := sys.PidfdOpen(sys.PID(pid), 0)
	if err != nil {
		return "", err
	}
	defer pfd.Close()
	sock, err := sys.PidfdGetfd(pfd, sys.TargetFD(fd))
	if err != nil {
		return "", err
	}
	defer sock.Close()
	sfd := sock.Int()
	var out []string
	for _, o := range []struct {
		name       string
		level, opt int
	}{
		{"nodelay", unix.IPPROTO_TCP, unix.TCP_NODELAY},
		{"keepalive", unix.SOL_SOCKET, unix.SO_KEEPALIVE},
		{"keepidle", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
		{"keepintvl", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
		{"keepcnt", unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
	} {
		v, err := unix.GetsockoptInt(sfd, o.level, o.opt)
		if err != nil {
			return "", fmt.Errorf("getsockopt %s: %w", o.name, err)
		}
		out = append(out, fmt.Sprintf("%s=%d", o.name, v))
	}
	return strings.Join(out, " "), nil
}

// Diff lists how after differs from v: fds missing or added, and fds whose
// socket is described differently. With sameInodes, the inodes must be the
// same too (no socket was replaced).
func (v SocketView) Diff(after SocketView, sameInodes bool) []string {
	var out []string
	for k, b := range v {
		a, ok := after[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: %s is gone", k, b.Desc))
		case a.Desc != b.Desc:
			out = append(out, fmt.Sprintf("%s: %s, was %s", k, a.Desc, b.Desc))
		case sameInodes && a.Ino != b.Ino:
			out = append(out, fmt.Sprintf("%s: inode %d, was %d (%s)", k, a.Ino, b.Ino, b.Desc))
		}
	}
	for k, a := range after {
		if _, ok := v[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new socket %s", k, a.Desc))
		}
	}
	slices.Sort(out)
	return out
}

// Count returns how many fds of the view are TCP connections, TCP
// listeners and UNIX sockets.
func (v SocketView) Count() (estab, listen, unix int) {
	for _, s := range v {
		switch {
		case strings.HasPrefix(s.Desc, "tcp ESTAB"):
			estab++
		case strings.HasPrefix(s.Desc, "tcp LISTEN"):
			listen++
		case strings.HasPrefix(s.Desc, "unix "):
			unix++
		}
	}
	return
}

package fdkind

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// socket is a TCP or UDP socket, IPv4 or IPv6: listening, bound, or
// an established connection with its queues (TCP_REPAIR, see
// pkg/sockets); or a UDP-Lite, ICMP ping or raw socket (pkg/sockets
// families.go). UNIX sockets are the kind unixSocket.
func socket() Kind {
	return Kind{
		Name:     image.FileSocket,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFSOCK },
		Describe: describeSocket,
		Open:     openSocket,
		Show:     func(f *image.File) string { return ShowSocket(f.Socket) },
	}
}

// describeSocket saves a socket; an established connection is put in
// repair mode and its queues are read.
func describeSocket(env DumpEnv, src *Source, f *image.File) error {
	our, ok := env.Socket(src.PID, src.FD)
	if !ok {
		return fmt.Errorf("socket appeared after the freeze: %w", ErrUnsupported)
	}
	if dom, err := unix.GetsockoptInt(our, unix.SOL_SOCKET, unix.SO_DOMAIN); err == nil && dom == unix.AF_UNIX {
		return describeUnix(env, src.PID, our, src.Stat.Ino, f)
	}
	if sockets.IsNetlink(our) {
		ns, err := sockets.DescribeNetlink(our)
		if errors.Is(err, sockets.ErrState) {
			return fmt.Errorf("socket: %w: %w", err, ErrUnsupported)
		}
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		f.Socket = ns
		return nil
	}
	if sockets.IsPacket(our) {
		ps, err := sockets.DescribePacket(our, src.Stat.Ino)
		if errors.Is(err, sockets.ErrState) {
			return fmt.Errorf("socket: %w: %w", err, ErrUnsupported)
		}
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		f.Socket = ps
		return nil
	}
	if sockets.OtherInetFD(our) {
		o, err := sockets.DescribeOther(our, src.Stat.Ino, proc.Path(src.PID, "net"))
		if errors.Is(err, sockets.ErrState) {
			return fmt.Errorf("socket: %w: %w", err, ErrUnsupported)
		}
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		f.Socket = o
		return hidden(env, our, o)
	}
	var defs *sockets.Defaults
	if se := env.Sockets(); se != nil {
		defs = se.Defaults()
	}
	s, err := sockets.DescribeWith(our, defs)
	if errors.Is(err, sockets.ErrAcceptQueue) && s != nil && env.Sockets().SkipInFlight() {
		// --skip-in-flight: the listener alone is saved; the
		// connections waiting in its queue are dropped (the dump said
		// which, see dump.Options.SkipInFlight).
		err = nil
	}
	if err != nil {
		if errors.Is(err, sockets.ErrState) {
			return fmt.Errorf("socket: %w: %w", err, ErrUnsupported)
		}
		return fmt.Errorf("socket: %w", err)
	}
	f.Socket = s
	if err := hidden(env, our, s); err != nil {
		return err
	}
	if s.Protocol == unix.IPPROTO_UDP {
		ds, err := sockets.PeekUDP(our, s.Family)
		if err != nil {
			return fmt.Errorf("UDP socket %s: %w", s.Local, err)
		}
		for _, d := range ds {
			s.RecvMsgs = append(s.RecvMsgs, env.AddData(d.Data))
			s.RecvFrom = append(s.RecvFrom, d.From.String())
			s.RecvTo = append(s.RecvTo, d.To.String())
		}
	}
	if s.Protocol == unix.IPPROTO_TCP && s.State == sockets.StateClose && s.TCP != nil {
		// Closed after a connection: the bytes it had not read.
		recvQ, err := sockets.PeekClosed(our)
		if err != nil {
			return fmt.Errorf("socket %s (closed): %w", s.Local, err)
		}
		if len(recvQ) > 0 {
			s.RecvDataID = env.AddData(recvQ)
		}
		return sockState(env.Sockets(), our, s, s.State)
	}
	if s.Protocol != unix.IPPROTO_TCP || !sockets.Connected(s.State) {
		return nil
	}
	st, recvQ, sendQ, err := sockets.DumpTCP(our)
	if err != nil {
		return fmt.Errorf("socket %s-%s: %w", s.Local, s.Remote, err)
	}
	// Out of repair mode at once: if ckpt died now the process would go
	// on with a socket it cannot use. The lock keeps the connection
	// still; it goes back to repair mode just before the kill.
	se := env.Sockets()
	if err := sockets.LeaveRepair(our, se.Reuse(our)); err != nil {
		return fmt.Errorf("socket %s-%s: leave repair mode: %w", s.Local, s.Remote, err)
	}
	se.Dumped(our)
	bound, ok, err := se.PortBound(our)
	if err != nil {
		return fmt.Errorf("socket %s-%s: %w", s.Local, s.Remote, err)
	}
	if ok {
		st.PortBound = &bound
	}
	s.TCP = &st.TCPRepair
	if err := sockState(se, our, s, st.State); err != nil {
		return err
	}
	if len(recvQ) > 0 {
		s.RecvDataID = env.AddData(recvQ)
	}
	if len(sendQ) > 0 {
		s.SendDataID = env.AddData(sendQ)
	}
	return nil
}

// sockState reads the socket layer state of the TCP socket our (s, in
// TCP state) into s.TCP, and refuses what the restore cannot make
// (sockets.CheckSockState).
func sockState(se SocketDumpEnv, our int, s *image.Socket, state int) error {
	ss, err := se.SockState(our, state, s.Shutdown)
	if err == nil {
		s.TCP.SockState = ss
		err = sockets.CheckSockState(state, s.Shutdown, s.TCP)
	}
	if err == nil {
		err = sockets.ConnectingRefusal(our, state, s.TCP)
	}
	if errors.Is(err, sockets.ErrState) {
		err = fmt.Errorf("%w: %w", err, ErrUnsupported)
	}
	if err != nil {
		return fmt.Errorf("TCP socket %s-%s: %w", s.Local, s.Remote, err)
	}
	return nil
}

// hidden reads what no getsockopt gives of an INET socket
// (SocketDumpEnv.Hidden): the multicast groups it joined, or a refusal.
func hidden(env DumpEnv, our int, s *image.Socket) error {
	se := env.Sockets()
	if se == nil {
		return nil
	}
	if err := se.Hidden(our, s); err != nil {
		if errors.Is(err, sockets.ErrState) {
			return fmt.Errorf("socket: %w: %w", err, ErrUnsupported)
		}
		return fmt.Errorf("socket: %w", err)
	}
	return nil
}

// openSocket builds a socket; an established connection is built in repair
// mode and resumed once the whole tree is (SocketRestoreEnv.Repairing).
func openSocket(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	s := f.Socket
	if s == nil {
		return Desc{}, fmt.Errorf("socket without its state: %w", image.ErrCorrupt)
	}
	if s.Family == unix.AF_UNIX {
		return openUnix(env, f, at)
	}
	if s.Family == unix.AF_NETLINK {
		sock, err := sockets.OpenNetlink(s)
		if err != nil {
			return Desc{}, err
		}
		return Desc{File: sock.File("socket")}, nil
	}
	if s.Family == unix.AF_PACKET {
		sock, err := sockets.OpenPacket(s)
		if err != nil {
			return Desc{}, err
		}
		return Desc{File: sock.File("socket")}, nil
	}
	if sockets.OtherInet(s.Family, s.Type, s.Protocol) {
		sock, err := sockets.OpenOther(s)
		if err != nil {
			return Desc{}, fmt.Errorf("socket %s %s: %w", s.Local, s.Remote, err)
		}
		return Desc{File: sock.File("socket")}, nil
	}
	se := env.Sockets()
	queue := func(id int) ([]byte, error) {
		if id == 0 {
			return nil, nil
		}
		return env.Data(id)
	}
	if rules := se.Rules(); rules != nil {
		c := *s
		if err := RewriteEndpoints(rules, &c); err != nil {
			return Desc{}, err
		}
		s = &c
	}
	recvQ, err := queue(s.RecvDataID)
	if err != nil {
		return Desc{}, fmt.Errorf("socket receive queue: %w", err)
	}
	sendQ, err := queue(s.SendDataID)
	if err != nil {
		return Desc{}, fmt.Errorf("socket send queue: %w", err)
	}
	sock, err := openInetSocket(s, recvQ, sendQ, se.SYNsDropped())
	if errors.Is(err, unix.EADDRINUSE) {
		return Desc{}, fmt.Errorf("socket %s: the address is already in use on this machine: %w", s.Local, err)
	}
	if errors.Is(err, unix.EADDRNOTAVAIL) {
		return Desc{}, fmt.Errorf("socket %s: this machine has no such address; move the endpoint with a rewrite rules file (--rules): %w", s.Local, err)
	}
	if err != nil {
		return Desc{}, fmt.Errorf("socket %s %s: %w", s.Local, s.Remote, err)
	}
	defer sock.Close()
	if len(s.RecvMsgs) > 0 {
		var data [][]byte
		for _, id := range s.RecvMsgs {
			b, err := env.Data(id)
			if err != nil {
				return Desc{}, fmt.Errorf("UDP socket queue: %w", err)
			}
			data = append(data, b)
		}
		if err := sockets.RefillDatagrams(sock.Int(), s, data); err != nil {
			return Desc{}, fmt.Errorf("UDP socket %s: %w", s.Local, err)
		}
	}
	of := sock.File("socket")
	if s.TCP != nil && s.State != sockets.StateClose {
		se.Repairing(of, s, sendQ)
	}
	if s.PortShared {
		kept, err := dupFile(of)
		if err != nil {
			of.Close()
			return Desc{}, err
		}
		env.Keep(kept)
		se.Finally(func() error {
			if err := sockets.SettlePort(int(kept.Fd()), s); err != nil {
				return fmt.Errorf("socket %s: SO_REUSEPORT: %w", s.Local, err)
			}
			return nil
		})
	}
	return Desc{File: of}, nil
}

// openInetSocket is sockets.Open; a socket whose rebuild connects for real
// (sockets.NeedsSYNDropped) is built behind a network lock of its own,
// unless the restore's lock is there (dropped: it drops the packets
// marked sockets.DropMark), so that its SYN never leaves (the segments
// the rebuild forges pass).
func openInetSocket(s *image.Socket, recvQ, sendQ []byte, dropped bool) (*sys.FD, error) {
	if !sockets.NeedsSYNDropped(s) || dropped {
		return sockets.Open(s, recvQ, sendQ)
	}
	local, err := netip.ParseAddrPort(s.Local)
	if err != nil {
		return nil, fmt.Errorf("local address %q: %w", s.Local, image.ErrCorrupt)
	}
	remote, err := netip.ParseAddrPort(s.Remote)
	if err != nil {
		return nil, fmt.Errorf("remote address %q: %w", s.Remote, image.ErrCorrupt)
	}
	l, err := netlock.Take(fmt.Sprintf("closed-%d-%d", os.Getpid(), local.Port()), []netlock.Conn{{Local: local, Remote: remote}}, -1)
	if err != nil {
		return nil, fmt.Errorf("a lock to rebuild the closed socket: %w", err)
	}
	sock, err := sockets.Open(s, recvQ, sendQ)
	if rerr := netlock.Release(l.Table, -1); rerr != nil && err == nil {
		sock.Close()
		return nil, fmt.Errorf("lift the lock of the rebuilt closed socket: %w", rerr)
	}
	return sock, err
}

// RewriteEndpoints applies the rewrite rules to a socket's endpoints.
func RewriteEndpoints(rules *rewrite.Rules, s *image.Socket) error {
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

// ShowSocket shows a socket's endpoints, so that a user can write rewrite
// rules for them.
func ShowSocket(s *image.Socket) string {
	if s == nil {
		return "socket"
	}
	kind := map[int]string{unix.SOCK_STREAM: "stream", unix.SOCK_DGRAM: "dgram", unix.SOCK_SEQPACKET: "seqpacket", unix.SOCK_RAW: "raw"}[s.Type]
	switch {
	case s.Family == unix.AF_UNIX && s.External && s.ExternalPeer != "":
		return fmt.Sprintf("unix %s, connected outside the dump to %s (connected again at restore)", kind, s.ExternalPeer)
	case s.Family == unix.AF_UNIX && s.External:
		return fmt.Sprintf("unix %s, connected outside the dump to an unnamed socket (needs ckpt-redo --inherit-fd)", kind)
	case s.Family == unix.AF_UNIX && s.Peer != 0:
		return fmt.Sprintf("unix %s, connected to socket %d", kind, s.Peer)
	case s.Family == unix.AF_UNIX && s.State == sockets.StateListen && len(s.AcceptQueue) > 0:
		return fmt.Sprintf("unix %s %s listening, %d waiting to be accepted (%d from a closed client)", kind, s.Local, len(s.AcceptQueue), len(s.Orphans))
	case s.Family == unix.AF_UNIX && s.AcceptOf != 0:
		out := strings.TrimSuffix("unix "+kind+" "+s.Local, " ") + fmt.Sprintf(", waiting in the accept queue of socket %d", s.AcceptOf)
		if s.Waiting != nil {
			out += fmt.Sprintf(", %d pieces sent", len(s.Waiting.Msgs))
		}
		return out
	case s.Family == unix.AF_UNIX:
		return fmt.Sprintf("unix %s %s", kind, s.Local)
	case s.Family == unix.AF_NETLINK:
		return fmt.Sprintf("netlink protocol %d, port id %d, groups %v", s.Protocol, s.PortID, s.Groups)
	case s.Family == unix.AF_PACKET:
		return fmt.Sprintf("packet %s, interface %d protocol %#04x", kind, s.Ifindex, s.LinkProto)
	case sockets.OtherInet(s.Family, s.Type, s.Protocol):
		out := sockets.OtherName(s.Family, s.Type, s.Protocol)
		if s.Local != "" {
			out += " " + s.Local
		}
		if s.Remote != "" {
			out += " -> " + s.Remote
		}
		return out
	case s.TCP != nil && (s.State == sockets.StateEstablished || s.State == 0):
		return fmt.Sprintf("tcp %s -> %s established, %d bytes unsent", s.Local, s.Remote, s.TCP.Unsent)
	case s.TCP != nil && s.State == sockets.StateClose:
		return fmt.Sprintf("tcp %s closed (was connected to %s)%s", s.Local, s.Remote, portFree(s))
	case s.TCP != nil:
		return fmt.Sprintf("tcp %s -> %s %s, %d bytes unsent", s.Local, s.Remote, sockets.StateName(s.State), s.TCP.Unsent)
	case s.Protocol == unix.IPPROTO_MPTCP && s.State == sockets.StateListen:
		return fmt.Sprintf("mptcp %s listening, backlog %d", s.Local, s.Backlog)
	case s.Protocol == unix.IPPROTO_MPTCP:
		return strings.TrimSuffix("mptcp "+s.Local, " ") + " (not connected)"
	case s.State == sockets.StateListen:
		return fmt.Sprintf("tcp %s listening, backlog %d", s.Local, s.Backlog)
	case s.Protocol == unix.IPPROTO_UDP && s.Remote != "":
		return fmt.Sprintf("udp %s -> %s", s.Local, s.Remote)
	case s.Protocol == unix.IPPROTO_UDP:
		return fmt.Sprintf("udp %s", s.Local)
	}
	return fmt.Sprintf("tcp %s (not connected)%s", s.Local, portFree(s))
}

// portFree says that a closed socket does not hold the port it shows.
func portFree(s *image.Socket) string {
	if s.PortFree {
		return ", port given back"
	}
	return ""
}

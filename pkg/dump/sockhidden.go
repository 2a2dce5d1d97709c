package dump

import (
	"fmt"
	"net"
	"strings"

	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// hiddenState is what the dump read of the state of its INET sockets
// that no getsockopt gives (bpftask.SockReader): multicast memberships,
// a reuseport group's program, per-socket IPsec policies, saved SYNs.
//
// The reader costs its load and check (about 40 ms, while the tree is
// frozen; a read of 100 sockets about 0.4 ms) and
// is loaded only for a socket that may hold such state, which cheap
// looks decide first, each once a dump: memberships only if the
// namespace's /proc/net/igmp or igmp6 show a group beyond the kernel's
// own (sockets.GroupsJoined) and the socket is not TCP (TCP cannot
// join); a reuseport program only with SO_REUSEPORT on; a saved SYN only
// on a TCP socket with TCP_SAVE_SYN (an accepted connection inherits
// its listener's); an IPsec policy only if the kernel counts socket
// policies in the namespace (sockets.SocketPolicies).
type hiddenState struct {
	groups, policies *bool // the namespace's, looked at once
	reader           *bpftask.SockReader
	openErr          error
	read             map[int]*bpftask.SockExtra // ckpt's fds, read once
}

// Hidden implements fdkind.SocketDumpEnv.
func (t *tree) Hidden(fd int, s *image.Socket) error {
	h := t.socks.hidden
	if h == nil {
		h = &hiddenState{}
		t.socks.hidden = h
	}
	tcp := s.Protocol == unix.IPPROTO_TCP && s.Type == unix.SOCK_STREAM
	var may []string
	if !tcp {
		if h.groups == nil {
			var joined bool
			err := t.socks.inNetns(func() (err error) {
				joined, err = sockets.GroupsJoined()
				return err
			})
			if err != nil {
				t.opts.logf("multicast groups of the network namespace: %v", err)
			}
			h.groups = &joined
		}
		if *h.groups {
			may = append(may, "multicast group memberships")
		}
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT); err != nil || v != 0 {
		may = append(may, "a program choosing among its SO_REUSEPORT group")
	}
	if tcp && s.State != sockets.StateListen {
		if v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_SAVE_SYN); err != nil || v != 0 {
			may = append(may, "a SYN saved by TCP_SAVE_SYN")
		}
	}
	if h.policies == nil {
		var has bool
		err := t.socks.inNetns(func() (err error) {
			has, err = sockets.SocketPolicies()
			return err
		})
		if err != nil {
			t.opts.logf("per-socket IPsec policies of the network namespace: %v", err)
		}
		h.policies = &has
	}
	if *h.policies {
		may = append(may, "a per-socket IPsec policy")
	}
	if len(may) == 0 {
		return nil
	}
	x, err := t.hiddenRead(fd)
	if err != nil {
		return fmt.Errorf("%s socket: it may hold %s, which only the BPF socket state reader reads: %v: cannot be restored: %w",
			sockName(s), strings.Join(may, ", "), err, sockets.ErrState)
	}
	switch {
	case x.SavedSYN:
		return fmt.Errorf("TCP socket: a SYN saved by TCP_SAVE_SYN not yet read (reading it frees it): cannot be restored: %w", sockets.ErrState)
	case x.ReuseportProg:
		return fmt.Errorf("%s socket: its SO_REUSEPORT group has a program (SO_ATTACH_REUSEPORT_CBPF or _EBPF), which cannot be read back: cannot be restored: %w", sockName(s), sockets.ErrState)
	case x.Policy[0] || x.Policy[1]:
		return fmt.Errorf("%s socket: a per-socket IPsec policy (IP_XFRM_POLICY or IPV6_XFRM_POLICY): cannot be restored: %w", sockName(s), sockets.ErrState)
	case x.More:
		return fmt.Errorf("%s socket: more multicast group memberships, or sources of one, than the BPF socket state reader reads (64): cannot be restored: %w", sockName(s), sockets.ErrState)
	}
	for _, m := range x.Memberships {
		j := image.Membership{Group: m.Group.String(), Ifindex: m.Ifindex, Include: m.Include}
		if m.Address.IsValid() && !m.Address.IsUnspecified() {
			j.Address = m.Address.String()
		}
		for _, a := range m.Sources {
			j.Sources = append(j.Sources, a.String())
		}
		err := t.socks.inNetns(func() error {
			ifi, err := net.InterfaceByIndex(m.Ifindex)
			if err == nil {
				j.Interface = ifi.Name
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("%s socket: multicast group %s joined on interface %d: %w", sockName(s), m.Group, m.Ifindex, err)
		}
		s.Joined = append(s.Joined, j)
	}
	return nil
}

// hiddenRead loads and checks the reader (once), reads every socket of
// ckpt's (once, or again for a socket not read: ckpt holds its copies
// of the tree's sockets from the freeze on) and gives fd's.
func (t *tree) hiddenRead(fd int) (*bpftask.SockExtra, error) {
	h := t.socks.hidden
	if h.reader == nil && h.openErr == nil {
		h.reader, h.openErr = bpftask.OpenSock(t.kernel)
		if h.openErr == nil {
			// Its check makes sockets on the loopback interface of
			// ckpt's network namespace, or else of the tree's (one
			// may be down); what it reads does not depend on where.
			if h.openErr = h.reader.Verify(); h.openErr != nil && t.socks.netns != nil {
				if err := t.socks.inNetns(h.reader.Verify); err == nil {
					h.openErr = nil
				}
			}
			if h.openErr != nil {
				h.reader.Close()
				h.reader = nil
			}
		}
	}
	if h.openErr != nil {
		return nil, h.openErr
	}
	x, ok := h.read[fd]
	if !ok {
		// Not read yet: the first time, or a socket ckpt took since (a
		// socket in flight in a UNIX socket's queue).
		m, err := h.reader.Read()
		if err != nil {
			return nil, err
		}
		h.read = m
		x, ok = h.read[fd]
	}
	if !ok {
		return nil, fmt.Errorf("socket fd %d of ckpt not read: %w", fd, bpftask.ErrSockMismatch)
	}
	return x, nil
}

// closeHidden unloads the reader.
func (t *tree) closeHidden() {
	if h := t.socks.hidden; h != nil && h.reader != nil {
		h.reader.Close()
		h.reader = nil
	}
}

// sockName names a socket's kind for a refusal: "UDP", "IPv6 raw"...
func sockName(s *image.Socket) string {
	v := ""
	if s.Family == unix.AF_INET6 {
		v = "IPv6 "
	}
	switch {
	case s.Type == unix.SOCK_STREAM:
		return v + "TCP"
	case s.Type == unix.SOCK_RAW:
		return v + "raw"
	case s.Protocol == unix.IPPROTO_UDP:
		return v + "UDP"
	case s.Protocol == unix.IPPROTO_UDPLITE:
		return v + "UDP-Lite"
	}
	return v + "ping"
}

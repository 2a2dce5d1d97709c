package sockets

import (
	"fmt"
	"net"
	"os"
	"testing"
)

// TestUDPQueue saves the datagrams queued in a UDP socket from several
// senders, rebuilds the socket and checks that it reads every datagram,
// in order, from its sender (IPv4, IPv6, v4-mapped).
func TestUDPQueue(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (raw sockets)")
	}
	tests := []struct{ network, addr, peer string }{
		{"udp4", "127.0.0.1:0", "127.0.0.1:0"},
		{"udp6", "[::1]:0", "[::1]:0"},
		{"udp", "[::]:0", "127.0.0.1:0"},
	}
	for _, tt := range tests {
		t.Run(tt.network+tt.addr, func(t *testing.T) {
			srv, err := net.ListenPacket(tt.network, tt.addr)
			must(t, err)
			port := srv.LocalAddr().(*net.UDPAddr).Port
			var want []string
			for i := 0; i < 3; i++ {
				c, err := net.ListenPacket("udp", tt.peer)
				must(t, err)
				to := &net.UDPAddr{IP: net.ParseIP("127.0.0.1"), Port: port}
				if tt.peer == "[::1]:0" {
					to.IP = net.ParseIP("::1")
				}
				msg := fmt.Sprintf("datagram %d", i)
				_, err = c.WriteTo([]byte(msg), to)
				must(t, err)
				want = append(want, msg+" from "+c.LocalAddr().String())
				c.Close()
			}
			f, err := srv.(*net.UDPConn).File()
			must(t, err)
			srv.Close()
			fd := int(f.Fd())
			s, err := Describe(fd)
			must(t, err)
			ds, err := PeekUDP(fd, s.Family)
			must(t, err)
			var data [][]byte
			for _, d := range ds {
				data = append(data, d.Data)
				s.RecvFrom = append(s.RecvFrom, d.From.String())
				s.RecvTo = append(s.RecvTo, d.To.String())
			}
			f.Close()
			nsock, err := Open(s, nil, nil)
			must(t, err)
			defer nsock.Close()
			must(t, RefillDatagrams(nsock.Int(), s, data))
			nf := nsock.File("restored")
			pc, err := net.FilePacketConn(nf)
			must(t, err)
			nf.Close()
			defer pc.Close()
			for i, w := range want {
				b := make([]byte, 100)
				n, from, err := pc.ReadFrom(b)
				must(t, err)
				fa := from.(*net.UDPAddr)
				got := fmt.Sprintf("%s from %s", b[:n], (&net.UDPAddr{IP: fa.IP.To4(), Port: fa.Port}).String())
				if fa.IP.To4() == nil {
					got = fmt.Sprintf("%s from %s", b[:n], fa)
				}
				if got != w {
					t.Errorf("datagram %d: %q, want %q", i, got, w)
				}
			}
		})
	}
}

package bpftask

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSockVerify runs the socket state reader's own check (memberships
// with source filters, IPv4 and IPv6; a reuseport group's program; a
// saved SYN) and reports what loading and reading cost.
func TestSockVerify(t *testing.T) {
	start := time.Now()
	r, err := OpenSock(nil)
	if errors.Is(err, ErrSockUnavailable) {
		t.Skipf("reader: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	loaded := time.Since(start)
	start = time.Now()
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded in %v, verified in %v", loaded, time.Since(start))
}

// BenchmarkSockRead measures one read of ckpt's sockets: 100 UDP
// sockets, each in 3 multicast groups on the loopback interface, among
// the test's other fds.
func BenchmarkSockRead(b *testing.B) {
	r, err := OpenSock(nil)
	if errors.Is(err, ErrSockUnavailable) {
		b.Skipf("reader: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	for i := range 100 {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		for g := range 3 {
			mreq := &unix.IPMreqn{Multiaddr: [4]byte{239, 255, byte(79 + g), byte(i)}, Ifindex: 1}
			if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		m, err := r.Read()
		if err != nil {
			b.Fatal(err)
		}
		if len(m) < 100 {
			b.Fatalf("%d sockets read", len(m))
		}
	}
}

// BenchmarkSockOpen measures loading the reader and its check, which a
// dump pays once when a socket may hold such state.
func BenchmarkSockOpen(b *testing.B) {
	for range b.N {
		r, err := OpenSock(nil)
		if errors.Is(err, ErrSockUnavailable) {
			b.Skipf("reader: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Verify(); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}

// TestSockMore checks that more memberships than the reader walks are
// said (the dump refuses such a socket): 65 IPv6 groups on the loopback
// interface (IPv6 has no per-socket limit; IPv4 has igmp_max_memberships).
func TestSockMore(t *testing.T) {
	r, err := OpenSock(nil)
	if errors.Is(err, ErrSockUnavailable) {
		t.Skipf("reader: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, n := range []int{sockMaxWalk, sockMaxWalk + 1} {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		for i := range n {
			mreq := &unix.IPv6Mreq{Multiaddr: [16]byte{0xff, 0x12, 15: byte(i)}, Interface: 1}
			if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_ADD_MEMBERSHIP, mreq); err != nil {
				t.Fatalf("membership %d: %v", i, err)
			}
		}
		m, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		x := m[fd]
		if x == nil || x.More != (n > sockMaxWalk) || len(x.Memberships) != min(n, sockMaxWalk) {
			t.Errorf("%d memberships: read %+v", n, x)
		}
	}
}

package sockets

import (
	"net/netip"
	"strings"
	"testing"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// TestGroupsJoined checks the fast path's reading of /proc/net/igmp and
// igmp6: the kernel's own groups are not taken for a socket's, anything
// else is; and on this machine a socket's membership shows.
func TestGroupsJoined(t *testing.T) {
	igmp := "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n1\tlo        :     1      V3\n\t\t\t\t010000E0     1 0:00000000\t\t0\n"
	addrs := "fd000000000000000000000000000002 04 40 00 80     eth0\nfe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
	kernel6 := "1    lo              ff020000000000000000000000000001     1 0000000C 0\n" +
		"4    eth0            ff0200000000000000000001fff00001     1 00000004 0\n" + // no address ends in f0:0001
		"4    eth0            ff0200000000000000000001ff000002     1 00000004 0\n"
	for _, c := range []struct {
		name   string
		v4, v6 string
		want   bool
	}{
		{"kernel groups", igmp, "1    lo              ff020000000000000000000000000001     1 0000000C 0\n4    eth0            ff0200000000000000000001ff000002     1 00000004 0\n4    eth0            ff0200000000000000000001ff000001     1 00000004 0\n", false},
		{"all hosts joined by a socket", "\t\t\t\t010000E0     2 0:00000000\t\t0\n", "", true},
		{"an IPv4 group", igmp + "\t\t\t\t030201EF     1 0:00000000\t\t0\n", "", true},
		{"an IPv6 group", igmp, "1    lo              ff120000000000000000000000000005     1 00000004 0\n", true},
		{"a solicited-node group twice", igmp, "4    eth0            ff0200000000000000000001ff000002     2 00000004 0\n", true},
		{"a solicited-node group of no address", igmp, kernel6, true},
	} {
		got := igmpJoined([]byte(c.v4)) || igmp6Joined([]byte(c.v6), []byte(addrs), nil, func(string) bool { return false })
		if got != c.want {
			t.Errorf("%s: joined %v, want %v", c.name, got, c.want)
		}
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	g := netip.MustParseAddr("239.255.78.1")
	if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &unix.IPMreqn{Multiaddr: g.As4(), Ifindex: 1}); err != nil {
		t.Fatal(err)
	}
	if j, err := GroupsJoined(); err != nil || !j {
		t.Errorf("GroupsJoined with a socket in 239.255.78.1: %v, %v; want true", j, err)
	}
}

// TestSocketPolicies asks the kernel for the count of per-socket IPsec
// policies (none made here).
func TestSocketPolicies(t *testing.T) {
	has, err := SocketPolicies()
	t.Logf("socket policies: %v (%v)", has, err)
}

// BenchmarkFastPath measures what a dump with INET sockets pays when
// none may hold state only the BPF reader reads: the looks at
// /proc/net/igmp, igmp6 and the count of socket IPsec policies.
func BenchmarkFastPath(b *testing.B) {
	for range b.N {
		if _, err := GroupsJoined(); err != nil {
			b.Fatal(err)
		}
		SocketPolicies()
	}
}

// TestJoinGroups joins the groups of an image on a new socket and reads
// each group's filter back with getsockopt(MCAST_MSFILTER); a group on
// an interface that does not exist fails, naming it.
func TestJoinGroups(t *testing.T) {
	cases := []struct {
		name   string
		family int
		m      image.Membership
		err    string
	}{
		{"IPv4 any source", unix.AF_INET, image.Membership{Group: "239.255.81.1", Ifindex: 1, Interface: "lo"}, ""},
		{"IPv4 include", unix.AF_INET, image.Membership{Group: "239.255.81.2", Address: "127.0.0.1", Ifindex: 1, Interface: "lo", Include: true, Sources: []string{"127.0.0.1", "127.0.0.3"}}, ""},
		{"IPv4 exclude", unix.AF_INET, image.Membership{Group: "239.255.81.3", Ifindex: 1, Interface: "lo", Sources: []string{"127.0.0.2"}}, ""},
		{"IPv4 on an IPv6 socket", unix.AF_INET6, image.Membership{Group: "239.255.81.4", Ifindex: 1, Interface: "lo", Sources: []string{"127.0.0.2"}}, ""},
		{"IPv6 exclude", unix.AF_INET6, image.Membership{Group: "ff12::81:5", Ifindex: 1, Interface: "lo", Sources: []string{"::1"}}, ""},
		{"interface gone", unix.AF_INET, image.Membership{Group: "239.255.81.6", Ifindex: 1, Interface: "ckptnosuch0"}, "ckptnosuch0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fd, err := unix.Socket(c.family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			err = joinGroups(fd, &image.Socket{Joined: []image.Membership{c.m}})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("joinGroups: %v, want an error naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			group := netip.MustParseAddr(c.m.Group)
			level := unix.IPPROTO_IPV6
			if group.Is4() {
				level = unix.IPPROTO_IP
			}
			// Room for 4 sources.
			gf, _ := groupFilter(1, group, false, nil)
			gf = append(gf, make([]byte, 3*128)...)
			*(*uint32)(unsafe.Pointer(&gf[140])) = 4
			if _, err := sys.Getsockopt(fd, level, unix.MCAST_MSFILTER, unsafe.Pointer(&gf[0]), uintptr(len(gf))); err != nil {
				t.Fatalf("getsockopt MCAST_MSFILTER: %v", err)
			}
			mode, n := *(*uint32)(unsafe.Pointer(&gf[136])), int(*(*uint32)(unsafe.Pointer(&gf[140])))
			if (mode == unix.MCAST_INCLUDE) != c.m.Include || n != len(c.m.Sources) {
				t.Errorf("filter mode %d with %d sources, want include %v with %v", mode, n, c.m.Include, c.m.Sources)
			}
		})
	}
}

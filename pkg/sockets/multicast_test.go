package sockets

import (
	"net/netip"
	"testing"

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

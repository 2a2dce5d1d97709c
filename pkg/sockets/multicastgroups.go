package sockets

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// GroupsJoined tells whether any socket of the caller's network
// namespace (the calling thread's: run it in sys.InNetns) may have joined
// a multicast group: whether /proc/net/igmp and /proc/net/igmp6, which
// list every group joined on each interface with its count of users,
// show more than the groups the kernel joins itself. Those are, for
// IPv4, 224.0.0.1 (all hosts) once an interface; for IPv6, ff01::1 and
// ff02::1 (all nodes) once, the all-routers groups (ff01::2, ff02::2,
// ff05::2) once when the interface forwards, and each solicited-node
// group (ff02::1:ffXX:XXXX) once for each unicast or anycast address of
// the interface that maps to it. Anything else, or a count above these,
// is a socket's (or a kernel user this does not know: then the answer
// is true too, which costs a look, never a difference).
func GroupsJoined() (bool, error) {
	v4, err := os.ReadFile("/proc/thread-self/net/igmp")
	if err != nil && !os.IsNotExist(err) {
		return true, fmt.Errorf("read igmp: %w", err)
	}
	if igmpJoined(v4) {
		return true, nil
	}
	v6, err := os.ReadFile("/proc/thread-self/net/igmp6")
	if os.IsNotExist(err) {
		return false, nil // no IPv6
	}
	if err != nil {
		return true, fmt.Errorf("read igmp6: %w", err)
	}
	addrs, err := os.ReadFile("/proc/thread-self/net/if_inet6")
	if err != nil && !os.IsNotExist(err) {
		return true, fmt.Errorf("read if_inet6: %w", err)
	}
	any6, err := os.ReadFile("/proc/thread-self/net/anycast6")
	if err != nil && !os.IsNotExist(err) {
		return true, fmt.Errorf("read anycast6: %w", err)
	}
	return igmp6Joined(v6, addrs, any6, forwarding), nil
}

// igmpJoined reads /proc/net/igmp: a line per interface ("Idx Device :
// Count Querier"), then a line per group starting with a tab (the group
// in hex, as the kernel's 32-bit word in host order, then its users).
func igmpJoined(b []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "\t") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return true
		}
		// 224.0.0.1 on a little-endian machine; the big-endian spelling
		// too.
		if (f[0] != "010000E0" && f[0] != "E0000001") || f[1] != "1" {
			return true
		}
	}
	return false
}

// forwarding reads whether IPv6 forwarding is on for an interface.
func forwarding(dev string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + dev + "/forwarding")
	return err != nil || strings.TrimSpace(string(b)) != "0"
}

// igmp6Joined reads /proc/net/igmp6 ("idx device group users flags
// timer", the group in 32 hex digits) against the interfaces' addresses
// (/proc/net/if_inet6: "address idx plen scope flags device";
// /proc/net/anycast6: "idx device address users").
func igmp6Joined(groups, addrs, anycast []byte, fwd func(dev string) bool) bool {
	// Solicited-node groups the addresses account for, by device.
	solicited := map[string]int{}
	count := func(dev, addr string) {
		if len(addr) == 32 {
			solicited[dev+" ff0200000000000000000001ff"+addr[26:]]++
		}
	}
	for _, line := range strings.Split(string(addrs), "\n") {
		if f := strings.Fields(line); len(f) >= 6 {
			count(f[5], f[0])
		}
	}
	for _, line := range strings.Split(string(anycast), "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			count(f[1], f[2])
		}
	}
	for _, line := range strings.Split(string(groups), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 || len(f[2]) != 32 {
			return true
		}
		if _, err := hex.DecodeString(f[2]); err != nil {
			return true
		}
		users, err := strconv.Atoi(f[3])
		if err != nil {
			return true
		}
		dev, g := f[1], f[2]
		switch {
		case g == "ff010000000000000000000000000001" || g == "ff020000000000000000000000000001":
			if users != 1 {
				return true
			}
		case g == "ff010000000000000000000000000002" || g == "ff020000000000000000000000000002" || g == "ff050000000000000000000000000002":
			if users != 1 || !fwd(dev) {
				return true
			}
		case strings.HasPrefix(g, "ff0200000000000000000001ff"):
			if users > solicited[dev+" "+g] {
				return true
			}
		default:
			return true
		}
	}
	return false
}

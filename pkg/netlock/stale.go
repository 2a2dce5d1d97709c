package netlock

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Holding returns a lock table in the network namespace netns (see conn)
// that drops the packets of one of conns, and that connection: a lock left
// behind by a dump whose image was not restored, or by a failed restore.
// The lock of a dump or restore still at work (of another member of the
// same group checkpoint, say) is not stale: its process still exists.
// A dump of a connection such a lock holds would save it stalled, and the
// restore would not lift someone else's lock. ok is false when no lock
// holds any of conns.
func Holding(conns []Conn, netns int) (table string, held Conn, ok bool, err error) {
	c, err := conn(netns)
	if err != nil {
		return "", Conn{}, false, fmt.Errorf("netlock: nftables: %w", err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return "", Conn{}, false, fmt.Errorf("netlock: list tables: %w", err)
	}
	for _, t := range ts {
		if !strings.HasPrefix(t.Name, TablePrefix) || inProgress(t.Name) {
			continue
		}
		keys, ports, err := lockContent(c, t)
		if gone(err) {
			continue // lifted meanwhile (another dump's, done)
		}
		if err != nil {
			return "", Conn{}, false, fmt.Errorf("netlock: table %s: %w", t.Name, err)
		}
		for _, cn := range conns {
			if cn.Remote.IsValid() && (keys[string(key(cn.Local, cn.Remote))] || keys[string(key(cn.Remote, cn.Local))]) {
				return t.Name, cn, true, nil
			}
			for _, p := range ports {
				if p.Port() == cn.Local.Port() && (p.Addr().IsUnspecified() || p.Addr() == cn.Local.Addr().Unmap()) {
					return t.Name, cn, true, nil
				}
			}
		}
	}
	return "", Conn{}, false, nil
}

// lockContent reads what lock table t drops: the connection keys of its
// sets, and the local addresses and ports of its per-port rules (an
// unspecified address for a rule on the port alone).
func lockContent(c *nftables.Conn, t *nftables.Table) (map[string]bool, []netip.AddrPort, error) {
	keys := map[string]bool{}
	// conns4/conns6: the one set per family of the tables of older ckpt
	// versions, both directions in it.
	for _, name := range []string{"peer4", "own4", "peer6", "own6", "conns4", "conns6"} {
		s, err := c.GetSetByName(t, name)
		if err != nil {
			continue // a table made by hand, or half made
		}
		elems, err := c.GetSetElements(s)
		if err != nil {
			return nil, nil, fmt.Errorf("set %s: %w", name, err)
		}
		for _, e := range elems {
			keys[string(e.Key)] = true
		}
	}
	var ports []netip.AddrPort
	for _, ch := range []string{"in", "out"} {
		rules, err := c.GetRules(t, &nftables.Chain{Name: ch, Table: t})
		if err != nil {
			continue
		}
		for _, r := range rules {
			if ap, ok := rulePort(r.Exprs); ok {
				ports = append(ports, ap)
			}
		}
	}
	return keys, ports, nil
}

// usedQueues returns the queue numbers the ckpt lock tables of the
// network namespace netns (see conn) send packets to, whether or not a
// holder still has them: a new holder must not take a queue of another
// lock, whose packets it would let through.
func usedQueues(netns int) (map[uint16]bool, error) {
	c, err := conn(netns)
	if err != nil {
		return nil, fmt.Errorf("netlock: nftables: %w", err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("netlock: list tables: %w", err)
	}
	used := map[uint16]bool{}
	for _, t := range ts {
		if !strings.HasPrefix(t.Name, TablePrefix) {
			continue
		}
		for _, ch := range []string{"in", "out"} {
			rules, err := c.GetRules(t, &nftables.Chain{Name: ch, Table: t})
			if err != nil {
				continue // gone meanwhile, or made by hand
			}
			for _, r := range rules {
				for _, e := range r.Exprs {
					if q, ok := queueOf(e); ok {
						used[q] = true
					}
				}
			}
		}
	}
	return used, nil
}

// rulePort reads back the address and port of a rule made by port().
func rulePort(es []expr.Any) (netip.AddrPort, bool) {
	var port uint16
	var addr netip.Addr
	found := false
	for i := 0; i+1 < len(es); i++ {
		p, ok1 := es[i].(*expr.Payload)
		cmp, ok2 := es[i+1].(*expr.Cmp)
		if !ok1 || !ok2 {
			continue
		}
		switch {
		case p.Base == expr.PayloadBaseTransportHeader && p.Len == 2 && len(cmp.Data) == 2:
			port, found = uint16(cmp.Data[0])<<8|uint16(cmp.Data[1]), true
		case p.Base == expr.PayloadBaseNetworkHeader && (p.Len == 4 || p.Len == 16):
			addr, _ = netip.AddrFromSlice(bytes.Clone(cmp.Data))
		}
	}
	if !found {
		return netip.AddrPort{}, false
	}
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	return netip.AddrPortFrom(addr, port), true
}

// gone reports whether err says that the table read was removed meanwhile.
func gone(err error) bool {
	return err != nil && (errors.Is(err, unix.ENOENT) || strings.Contains(err.Error(), "no such file"))
}

// inProgress reports whether the lock table name belongs to a dump or a
// restore still at work: the dump's root process ("ckpt-lock-PID-N") or
// the restoring ckpt-redo ("ckpt-lock-redo-PID") still exists. After a
// killing dump the root is gone while its lock waits for the restore.
func inProgress(name string) bool {
	rest := strings.TrimPrefix(strings.TrimPrefix(name, TablePrefix), "redo-")
	num, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(num)
	if err != nil || pid <= 0 {
		return false
	}
	err = unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

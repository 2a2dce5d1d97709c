// Package netlock keeps the peers of checkpointed TCP connections from
// being reset while the connections have no socket.
//
// Between the moment a dump reads a connection's queues and the moment the
// restored socket exists, a packet from the peer would find no socket and
// the kernel would answer it with a RST. The lock is an nftables table in
// the dumped process's network namespace that drops both directions of
// every dumped connection: the peer sees silence, and TCP retransmits once
// the connection is back. Packets marked sockets.InjectMark pass: the
// segments the restore forges to replay a FIN.
//
// Lifetime: the lock is taken by the dump before any queue is read. If the
// dump fails, it is removed. If ckpt dies before the dump succeeded, a guard
// process (Guard) that ckpt started removes it. Once the dump has
// succeeded it stays, named in the image, until ckpt-redo has rebuilt every
// connection (or `ckpt unlock` lifts it).
package netlock

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ckpt/ckpt/pkg/sockets"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Conn is one connection to lock, seen from the dumped process. A
// listening socket has no Remote: every packet to or from its local
// address and port is dropped, so that no connection completes its
// handshake while the listener is being dumped (the client retransmits its
// SYN to the restored one).
type Conn struct {
	Local, Remote netip.AddrPort
}

// TablePrefix starts the name of every lock table.
const TablePrefix = "ckpt-lock-"

// Lock is a taken lock.
type Lock struct {
	Table string
}

func table(name string) *nftables.Table {
	return &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
}

// conn talks to nftables in the network namespace netns (an fd of
// /proc/PID/ns/net), or in the caller's when netns is negative.
func conn(netns int) (*nftables.Conn, error) {
	if netns >= 0 {
		return nftables.New(nftables.WithNetNSFd(netns))
	}
	return nftables.New()
}

// Take installs a lock named name (TablePrefix is added) for conns in the
// network namespace netns (see conn).
func Take(name string, conns []Conn, netns int) (*Lock, error) {
	c, err := conn(netns)
	if err != nil {
		return nil, fmt.Errorf("netlock: nftables: %w", err)
	}
	t := c.AddTable(table(TablePrefix + name))
	policy := nftables.ChainPolicyAccept
	in := c.AddChain(&nftables.Chain{Name: "in", Table: t, Hooknum: nftables.ChainHookInput,
		Priority: nftables.ChainPriorityRef(-300), Type: nftables.ChainTypeFilter, Policy: &policy})
	out := c.AddChain(&nftables.Chain{Name: "out", Table: t, Hooknum: nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityRef(-300), Type: nftables.ChainTypeFilter, Policy: &policy})
	// The segments a restore forges to replay a FIN (pkg/sockets) pass.
	for _, ch := range []*nftables.Chain{in, out} {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(sockets.InjectMark)},
			&expr.Verdict{Kind: expr.VerdictAccept},
		}})
	}
	// One set of connections per address family, keyed by
	// saddr . sport . daddr . dport, holding both directions of every
	// connection; one rule per chain and family looks packets up in it.
	for _, fam := range []struct {
		name  string
		proto byte
		addr  nftables.SetDatatype
		v6    bool
	}{{"conns4", unix.NFPROTO_IPV4, nftables.TypeIPAddr, false}, {"conns6", unix.NFPROTO_IPV6, nftables.TypeIP6Addr, true}} {
		set := &nftables.Set{Table: t, Name: fam.name, Concatenation: true,
			KeyType: nftables.MustConcatSetType(fam.addr, nftables.TypeInetService, fam.addr, nftables.TypeInetService)}
		if err := c.AddSet(set, nil); err != nil {
			return nil, fmt.Errorf("netlock: set %s: %w", fam.name, err)
		}
		for _, ch := range []*nftables.Chain{in, out} {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: lookup(fam.proto, fam.v6, fam.name)})
		}
		var elems []nftables.SetElement
		for _, cn := range conns {
			if is6(cn.Local) != fam.v6 {
				continue
			}
			if !cn.Remote.IsValid() {
				c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: port(fam.proto, fam.v6, cn.Local, false)})
				c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: port(fam.proto, fam.v6, cn.Local, true)})
				continue
			}
			elems = append(elems, nftables.SetElement{Key: key(cn.Remote, cn.Local)}, nftables.SetElement{Key: key(cn.Local, cn.Remote)})
		}
		// A netlink message has a size limit: add the elements in batches.
		for len(elems) > 0 {
			n := min(len(elems), 256)
			if err := c.SetAddElements(set, elems[:n]); err != nil {
				return nil, fmt.Errorf("netlock: set %s: %w", fam.name, err)
			}
			elems = elems[n:]
			if err := c.Flush(); err != nil {
				Release(t.Name, netns)
				return nil, fmt.Errorf("netlock: install table %s: %w", t.Name, err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		Release(t.Name, netns)
		return nil, fmt.Errorf("netlock: install table %s: %w", t.Name, err)
	}
	return &Lock{Table: t.Name}, nil
}

// port builds "tcp packet to (or, with src, from) this address and port:
// drop"; an unspecified address matches the port alone.
func port(proto byte, v6 bool, ap netip.AddrPort, src bool) []expr.Any {
	addrOff, portOff := uint32(16), uint32(2)
	if v6 {
		addrOff = 24
	}
	if src {
		addrOff, portOff = 12, 0
		if v6 {
			addrOff = 8
		}
	}
	e := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: portOff, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(ap.Port() >> 8), byte(ap.Port())}},
	}
	if a := ap.Addr().Unmap(); !a.IsUnspecified() {
		b := a.AsSlice()
		e = append(e,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff, Len: uint32(len(b))},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b})
	}
	return append(e, &expr.Verdict{Kind: expr.VerdictDrop})
}

func is6(a netip.AddrPort) bool { return a.Addr().Is6() && !a.Addr().Is4In6() }

// key is a set key: each field of saddr . sport . daddr . dport padded to
// a 32-bit register.
func key(src, dst netip.AddrPort) []byte {
	var b []byte
	for _, ap := range []netip.AddrPort{src, dst} {
		b = append(b, ap.Addr().Unmap().AsSlice()...)
		b = append(b, byte(ap.Port()>>8), byte(ap.Port()), 0, 0)
	}
	return b
}

// lookup builds "tcp packet whose saddr . sport . daddr . dport is in the
// set: drop", loading the fields into consecutive 32-bit registers.
func lookup(proto byte, v6 bool, set string) []expr.Any {
	saddr, daddr, alen := uint32(12), uint32(16), uint32(4)
	if v6 {
		saddr, daddr, alen = 8, 24, 16
	}
	const reg0 = 8 // NFT_REG32_00
	sport := reg0 + alen/4
	dreg := sport + 1
	dport := dreg + alen/4
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: reg0, Base: expr.PayloadBaseNetworkHeader, Offset: saddr, Len: alen},
		&expr.Payload{DestRegister: sport, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
		&expr.Payload{DestRegister: dreg, Base: expr.PayloadBaseNetworkHeader, Offset: daddr, Len: alen},
		&expr.Payload{DestRegister: dport, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: reg0, SetName: set},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// Release removes the lock table named table, if it exists, in the
// network namespace netns (see conn).
func Release(tableName string, netns int) error {
	if !strings.HasPrefix(tableName, TablePrefix) {
		return fmt.Errorf("netlock: %q is not a ckpt lock table", tableName)
	}
	c, err := conn(netns)
	if err != nil {
		return fmt.Errorf("netlock: nftables: %w", err)
	}
	c.DelTable(table(tableName))
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		if strings.Contains(err.Error(), "no such file") {
			return nil
		}
		return fmt.Errorf("netlock: remove table %s: %w", tableName, err)
	}
	return nil
}

// Tables lists the lock tables present in the caller's network namespace.
func Tables() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("netlock: nftables: %w", err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("netlock: list tables: %w", err)
	}
	var out []string
	for _, t := range ts {
		if strings.HasPrefix(t.Name, TablePrefix) {
			out = append(out, t.Name)
		}
	}
	return out, nil
}

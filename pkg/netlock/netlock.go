// Package netlock keeps the peers of checkpointed TCP connections from
// being reset while the connections have no socket.
//
// Between the moment a dump reads a connection's queues and the moment the
// restored socket exists, a packet from the peer would find no socket and
// the kernel would answer it with a RST. The lock is an nftables table in
// the dumped process's network namespace that drops both directions of
// every dumped connection: the peer sees silence, and TCP retransmits once
// the connection is back.
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

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Conn is one connection to lock, seen from the dumped process.
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

// Take installs a lock named name (TablePrefix is added) for conns in the
// caller's network namespace.
func Take(name string, conns []Conn) (*Lock, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("netlock: nftables: %w", err)
	}
	t := c.AddTable(table(TablePrefix + name))
	policy := nftables.ChainPolicyAccept
	in := c.AddChain(&nftables.Chain{Name: "in", Table: t, Hooknum: nftables.ChainHookInput,
		Priority: nftables.ChainPriorityRef(-300), Type: nftables.ChainTypeFilter, Policy: &policy})
	out := c.AddChain(&nftables.Chain{Name: "out", Table: t, Hooknum: nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityRef(-300), Type: nftables.ChainTypeFilter, Policy: &policy})
	for _, cn := range conns {
		// Packets from the peer, and packets to it.
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: match(cn.Remote, cn.Local)})
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: match(cn.Local, cn.Remote)})
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("netlock: install table %s: %w", t.Name, err)
	}
	return &Lock{Table: t.Name}, nil
}

// match builds "tcp from src to dst: drop".
func match(src, dst netip.AddrPort) []expr.Any {
	proto, saddr, daddr := byte(unix.NFPROTO_IPV4), uint32(12), uint32(16)
	if src.Addr().Is6() && !src.Addr().Is4In6() {
		proto, saddr, daddr = unix.NFPROTO_IPV6, 8, 24
	}
	sa, da := src.Addr().Unmap().AsSlice(), dst.Addr().Unmap().AsSlice()
	port := func(p uint16) []byte { return []byte{byte(p >> 8), byte(p)} }
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: saddr, Len: uint32(len(sa))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: sa},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: daddr, Len: uint32(len(da))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: da},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port(src.Port())},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port(dst.Port())},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// Release removes the lock table named table, if it exists.
func Release(tableName string) error {
	if !strings.HasPrefix(tableName, TablePrefix) {
		return fmt.Errorf("netlock: %q is not a ckpt lock table", tableName)
	}
	c, err := nftables.New()
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

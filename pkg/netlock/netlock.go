// Package netlock keeps the peers of checkpointed TCP connections from
// being reset while the connections have no socket, and from backing off.
//
// Between the moment a dump reads a connection's queues and the moment the
// restored socket exists, a packet from the peer would find no socket and
// the kernel would answer it with a RST. The lock is an nftables table in
// the dumped process's network namespace that stops both directions of
// every dumped connection and every packet to a dumped listener. The
// locked sockets' own packets are dropped. The peers' packets are queued
// (xtables' NFQUEUE target through nft_compat, no bypass) to an
// nfnetlink queue that a holder (Holder) binds and keeps without a
// verdict; when the lock is released they are let through, so that the
// restored socket gets them at once instead of when the peer's
// retransmission timer, backed off during the outage, fires again. Packets
// marked sockets.InjectMark pass: the segments the restore forges to
// replay a FIN. Packets marked sockets.DropMark are dropped before
// anything else, for the lock's whole life: the SYN (and the answer to
// the forged SYN-ACK) of a socket the restore connects for real, which
// the rule of a peer of the tree would otherwise hold and let through.
//
// The holder never fails open: with no holder (it died, or none could be
// had) the kernel drops what is queued, which is the drop lock's
// behaviour, never a RST. Its queue keeps QueueMaxLen packets and drops
// the ones beyond; the kernel also drops every packet queued in a
// namespace when any netfilter hook of that namespace goes away (another
// lock's table removed meanwhile, say). Dropped packets are retransmitted
// by their senders, as with the drop lock.
//
// Lifetime: the lock is taken by the dump before any queue is read, with
// a holder process (StartHolder: `ckpt netlock-hold`, in a session of its
// own) that outlives a killing dump. If the dump fails or leaves the
// processes running, it is released. If ckpt dies before the dump
// succeeded, a guard process (Guard) that ckpt started releases it. Once
// the dump has succeeded it stays, named in the image, until ckpt-redo has
// rebuilt every connection and let the processes run (or `ckpt unlock`
// lifts it). A restore that cannot use the dump's lock (another network
// namespace or host) takes its own, held by goroutines of its own
// (Hold). Whoever releases a lock finds its holder from the table name
// alone, through an abstract UNIX socket in the lock's namespace
// (controlName), and opens the lock before telling it to let the packets
// through, then removes the table (Release); a dump whose connections
// live on elsewhere has the holder drop them instead (Discard). A holder
// whose table is gone exits.
package netlock

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/ckpt/ckpt/pkg/sockets"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
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
	// Queued says that the peers' packets are queued to a holder rather
	// than dropped.
	Queued bool
	// HoldErr is why TakeHeld's lock drops the peers' packets instead.
	HoldErr error
	// started reports the start of TakeHeld's holder process.
	started <-chan error
}

// HolderStarted waits until the holder process of a lock taken by
// TakeHeld with an executable is started, and says why it could not be
// (its packets are then held by the caller's goroutines, which end with
// the caller). Call it before the caller may exit or release the lock.
func (l *Lock) HolderStarted() error {
	if l == nil || l.started == nil {
		return nil
	}
	err := <-l.started
	l.started = nil
	return err
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
// network namespace netns (see conn) that drops the packets of both
// directions.
func Take(name string, conns []Conn, netns int) (*Lock, error) {
	return take(name, conns, netns, -1)
}

// TakeQueued is Take, but the packets from the peers (to a locked
// connection or listener) go to nfnetlink queue number queue instead of
// being dropped, without the bypass flag: while nobody holds that queue,
// the kernel drops them, as Take's lock does.
func TakeQueued(name string, conns []Conn, netns int, queue uint16) (*Lock, error) {
	return take(name, conns, netns, int(queue))
}

// TakeHeld takes a queued lock (TakeQueued) whose packets a holder keeps
// until Release: a process `exe netlock-hold` in a session of its own,
// surviving the caller, when exe is set (StartHolder; see
// Lock.HolderStarted), else goroutines of the caller (Hold), which live as
// long as the caller. A lock whose holder could not be had drops the
// packets, as Take's; Lock.HoldErr says why.
func TakeHeld(name string, conns []Conn, netns *os.File, exe string) (*Lock, error) {
	nsFD := -1
	if netns != nil {
		nsFD = int(netns.Fd())
	}
	var queue uint16
	var herr error
	var started <-chan error
	if exe != "" {
		queue, started, herr = StartHolder(exe, TablePrefix+name, netns)
	} else {
		var h *Holder
		if h, herr = Hold(TablePrefix+name, nsFD); herr == nil {
			queue = h.Queue
		}
	}
	if herr != nil {
		l, err := Take(name, conns, nsFD)
		if l != nil {
			l.HoldErr = herr
		}
		return l, err
	}
	l, err := TakeQueued(name, conns, nsFD, queue)
	if err != nil {
		// The holder, which never saw its table, is told to go; a kernel
		// without the queue target (nft_compat, xt_NFQUEUE) gets the drop
		// lock.
		if started != nil {
			<-started
		}
		if _, done, _ := askRelease(TablePrefix+name, nsFD, "discard"); done != nil {
			done()
		}
		l, derr := Take(name, conns, nsFD)
		if derr != nil {
			return nil, derr
		}
		l.HoldErr = fmt.Errorf("queue rules: %w", err)
		return l, nil
	}
	l.started = started
	return l, nil
}

func take(name string, conns []Conn, netns, queue int) (*Lock, error) {
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
	// The packets of a socket the restore connects for real (its SYN,
	// its answer to the SYN-ACK it forges: pkg/sockets DropMark) are
	// dropped first, even where a peer of the tree would queue them,
	// and for the lock's whole life (OpenOutgoing leaves them).
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(sockets.DropMark)},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	// The segments a restore forges to replay a FIN (pkg/sockets) pass.
	for _, ch := range []*nftables.Chain{in, out} {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(sockets.InjectMark)},
			&expr.Verdict{Kind: expr.VerdictAccept},
		}})
	}
	// Per address family, two sets of connections keyed by
	// saddr . sport . daddr . dport: "peer" holds the direction from each
	// peer to the dumped socket, "own" the other. Both chains look packets
	// up in both (a peer on this host is seen first by the output hook):
	// the peers' packets are queued (or dropped), ours dropped.
	for _, fam := range []struct {
		peer, own string
		proto     byte
		addr      nftables.SetDatatype
		v6        bool
	}{{"peer4", "own4", unix.NFPROTO_IPV4, nftables.TypeIPAddr, false}, {"peer6", "own6", unix.NFPROTO_IPV6, nftables.TypeIP6Addr, true}} {
		sets := map[string]*nftables.Set{}
		for _, name := range []string{fam.peer, fam.own} {
			set := &nftables.Set{Table: t, Name: name, Concatenation: true,
				KeyType: nftables.MustConcatSetType(fam.addr, nftables.TypeInetService, fam.addr, nftables.TypeInetService)}
			if err := c.AddSet(set, nil); err != nil {
				return nil, fmt.Errorf("netlock: set %s: %w", name, err)
			}
			sets[name] = set
		}
		for _, ch := range []*nftables.Chain{in, out} {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: lookup(fam.proto, fam.v6, fam.peer, verdict(queue))})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: lookup(fam.proto, fam.v6, fam.own, verdict(-1)), UserData: ownTag})
		}
		elems := map[string][]nftables.SetElement{}
		for _, cn := range conns {
			if is6(cn.Local) != fam.v6 {
				continue
			}
			if !cn.Remote.IsValid() {
				c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: port(fam.proto, fam.v6, cn.Local, false, verdict(queue))})
				c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: port(fam.proto, fam.v6, cn.Local, true, verdict(-1)), UserData: ownTag})
				continue
			}
			elems[fam.peer] = append(elems[fam.peer], nftables.SetElement{Key: key(cn.Remote, cn.Local)})
			elems[fam.own] = append(elems[fam.own], nftables.SetElement{Key: key(cn.Local, cn.Remote)})
		}
		for name, es := range elems {
			// A netlink message has a size limit: add the elements in batches.
			for len(es) > 0 {
				n := min(len(es), 256)
				if err := c.SetAddElements(sets[name], es[:n]); err != nil {
					return nil, fmt.Errorf("netlock: set %s: %w", name, err)
				}
				es = es[n:]
				if err := c.Flush(); err != nil {
					Release(t.Name, netns)
					return nil, fmt.Errorf("netlock: install table %s: %w", t.Name, err)
				}
			}
		}
	}
	if err := c.Flush(); err != nil {
		Release(t.Name, netns)
		return nil, fmt.Errorf("netlock: install table %s: %w", t.Name, err)
	}
	return &Lock{Table: t.Name, Queued: queue >= 0}, nil
}

// verdict is the rule's end: queue to queue, or drop when queue is
// negative. The queue is xtables' NFQUEUE target (revision 0: a queue
// number and nothing else, so no bypass) through nft_compat: kernels
// built without nft_queue (this project's CI's among them) have it.
func verdict(queue int) expr.Any {
	if queue < 0 {
		return &expr.Verdict{Kind: expr.VerdictDrop}
	}
	// struct xt_NFQ_info { __u16 queuenum; }, padded to XT_ALIGN.
	info := xt.Unknown(make([]byte, 8))
	binary.NativeEndian.PutUint16(info, uint16(queue))
	return &expr.Target{Name: nfqueueTarget, Rev: 0, Info: &info}
}

// nfqueueTarget is the name of xtables' queue target.
const nfqueueTarget = "NFQUEUE"

// queueOf returns the queue number a rule's expression sends packets to.
func queueOf(e expr.Any) (uint16, bool) {
	switch e := e.(type) {
	case *expr.Queue:
		return e.Num, true
	case *expr.Target:
		if info, ok := e.Info.(*xt.Unknown); ok && e.Name == nfqueueTarget && len(*info) >= 2 {
			return binary.NativeEndian.Uint16(*info), true
		}
	}
	return 0, false
}

// port builds "tcp packet to (or, with src, from) this address and port:
// v"; an unspecified address matches the port alone.
func port(proto byte, v6 bool, ap netip.AddrPort, src bool, v expr.Any) []expr.Any {
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
	return append(e, v)
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
// set: v", loading the fields into consecutive 32-bit registers.
func lookup(proto byte, v6 bool, set string, v expr.Any) []expr.Any {
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
		v,
	}
}

// Release lifts the lock table named tableName, if it exists, in the
// network namespace netns (see conn): it opens the lock (empties its
// chains, so that nothing more is queued and what is let through is not
// queued again further on), has the lock's holder, if any, let every
// packet it held through, then removes the table. The order matters: the
// kernel drops every packet queued in a namespace when a netfilter hook
// of it goes away, as removing the table does.
func Release(tableName string, netns int) error {
	return lift(tableName, netns, "release")
}

// openChains empties the chains of lock table t: nothing is queued or
// dropped any more, and a packet let through by its holder is not queued
// again by the next hook it meets (a peer on this host's packet was
// queued on its way out, and comes in next).
func openChains(c *nftables.Conn, t *nftables.Table) {
	for _, ch := range []string{"in", "out"} {
		c.FlushChain(&nftables.Chain{Name: ch, Table: t})
	}
	c.Flush() // fails for a table already gone (or made by hand): removed next all the same
}

// ownTag marks the rules that drop the locked sockets' own packets.
var ownTag = []byte("ckpt-own")

// OpenOutgoing lets the locked sockets' own packets out, while the
// peers' stay held (or dropped): for restored connections out of repair
// mode whose processes are about to run, so that what they send at once
// (an answer to a request they had received before the dump) is not
// dropped and left to their retransmission timer.
func OpenOutgoing(tableName string, netns int) error {
	if !strings.HasPrefix(tableName, TablePrefix) {
		return fmt.Errorf("netlock: %q is not a ckpt lock table", tableName)
	}
	c, err := conn(netns)
	if err != nil {
		return fmt.Errorf("netlock: nftables: %w", err)
	}
	own, err := ownRules(c, tableName)
	if err != nil || len(own) == 0 {
		return err
	}
	for _, r := range own {
		c.DelRule(r)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netlock: table %s: open outgoing: %w", tableName, err)
	}
	return nil
}

// OutgoingHeld reports whether the lock table named tableName in the
// network namespace netns (see conn) still drops the locked sockets' own
// packets (OpenOutgoing has not run).
func OutgoingHeld(tableName string, netns int) (bool, error) {
	c, err := conn(netns)
	if err != nil {
		return false, fmt.Errorf("netlock: nftables: %w", err)
	}
	own, err := ownRules(c, tableName)
	return len(own) > 0, err
}

// ownRules returns the rules of lock table tableName that drop the
// locked sockets' own packets.
func ownRules(c *nftables.Conn, tableName string) ([]*nftables.Rule, error) {
	t := table(tableName)
	var own []*nftables.Rule
	for _, ch := range []string{"in", "out"} {
		rules, err := c.GetRules(t, &nftables.Chain{Name: ch, Table: t})
		if err != nil {
			return nil, fmt.Errorf("netlock: table %s: %w", tableName, err)
		}
		for _, r := range rules {
			if bytes.Equal(r.UserData, ownTag) {
				own = append(own, r)
			}
		}
	}
	return own, nil
}

// Discard lifts the lock table named tableName as Release does, but its
// holder drops what it held: for connections that do not come back in
// this namespace (an image restored elsewhere), whose peers would be
// answered with a reset.
func Discard(tableName string, netns int) error {
	return lift(tableName, netns, "discard")
}

func lift(tableName string, netns int, verb string) error {
	if !strings.HasPrefix(tableName, TablePrefix) {
		return fmt.Errorf("netlock: %q is not a ckpt lock table", tableName)
	}
	c, err := conn(netns)
	if err != nil {
		return fmt.Errorf("netlock: nftables: %w", err)
	}
	t := table(tableName)
	openChains(c, t)
	_, done, herr := askRelease(tableName, netns, verb)
	defer done()
	c.DelTable(t)
	if err := c.Flush(); err != nil && !gone(err) {
		return fmt.Errorf("netlock: remove table %s: %w", tableName, err)
	}
	if herr != nil {
		return fmt.Errorf("netlock: lock %s lifted, but its held packets were dropped: %w", tableName, herr)
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

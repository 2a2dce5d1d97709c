package bpftask

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// The socket extras reader reads what the kernel keeps of an INET socket
// (TCP, UDP, raw, ping, UDP-Lite) and no getsockopt gives back: its
// multicast group memberships with their source filters (struct
// ip_mc_socklist, struct ipv6_mc_socklist), whether its SO_REUSEPORT
// group has a program (SO_ATTACH_REUSEPORT_CBPF/EBPF), whether it has a
// per-socket IPsec policy (IP_XFRM_POLICY) and whether a SYN saved by
// TCP_SAVE_SYN is still held. A task file iterator (iter/task_file)
// limited to ckpt's own process walks ckpt's fds: ckpt holds a copy of
// every socket of a dump (pidfd_getfd), so one program serves every kind
// of socket and every network namespace. For each socket file it writes
// a header, then one record a membership; the membership lists are
// walked up to sockMaxWalk entries (more is said, and refused by the
// caller), sources up to sockMaxSources. It is trusted only once Verify
// read sockets it made itself the same way (sockextraverify.go).

var (
	// ErrSockUnavailable means the kernel cannot run the socket extras
	// reader: no BTF, no task file iterator, or not allowed.
	ErrSockUnavailable = errors.New("BPF socket state reader unavailable")
	// ErrSockMismatch means the reader read sockets Verify made
	// otherwise than they were made: it must not be used.
	ErrSockMismatch = errors.New("BPF socket state reader does not read what the sockets were made with")
)

const (
	sockMaxWalk    = 64 // memberships walked a family
	sockMaxSources = 64 // sources read a membership
	sockHdr        = 64 // header record
	sockRecHdr     = 80 // membership record before its sources
	sockNodeMax    = 64 // bytes of a list node read
	sockV4         = sockHdr
	sockV6         = sockV4 + sockRecHdr + sockMaxSources*4
	sockTrunc      = sockV6 + sockRecHdr + sockMaxSources*16
	sockBuf        = sockTrunc + 8
)

// Record kinds.
const (
	recSocket = iota
	recV4
	recV6
	recV4More // more memberships than walked
	recV6More
)

// Membership is a multicast group a socket joined, as the kernel keeps
// it.
type Membership struct {
	// Group is the group's address (IPv4 for IP_ADD_MEMBERSHIP and its
	// kin, IPv6 for IPV6_ADD_MEMBERSHIP).
	Group netip.Addr
	// Address is, for an IPv4 group, imr_address as the program gave it
	// (struct ip_mreqn); unset for IPv6.
	Address netip.Addr
	// Ifindex is the interface the group was joined on.
	Ifindex int
	// Include is the filter mode: true MCAST_INCLUDE (only Sources),
	// false MCAST_EXCLUDE (all but Sources).
	Include bool
	// Sources are the source filter's addresses.
	Sources []netip.Addr
}

// SockExtra is what the reader read of one socket.
type SockExtra struct {
	Family, Type, Protocol int
	Memberships            []Membership
	// More is set when the socket has more memberships, or a membership
	// more sources, than the reader reads.
	More bool
	// ReuseportProg: its SO_REUSEPORT group has a program.
	ReuseportProg bool
	// Policy: a per-socket IPsec policy, for input ([0]) or output ([1]).
	Policy [2]bool
	// SavedSYN: a SYN saved by TCP_SAVE_SYN is held, not yet read.
	SavedSYN bool
}

// SockReader reads the extras of ckpt's own INET sockets.
type SockReader struct {
	l    *sockLayout
	buf  *ebpf.Map
	prog *ebpf.Program
}

// sockLayout holds the offsets (bytes) the program reads and the
// decoder uses.
type sockLayout struct {
	itfFD, itfFile                   uint32 // struct bpf_iter__task_file
	fInode, fPrivate                 uint32 // struct file
	iMode                            uint32 // struct inode
	socketSk                         uint32 // struct socket
	family, typ, protocol            uint32 // struct sock
	reuseportCB, policy              uint32
	cbProg                           uint32 // struct sock_reuseport
	mcList, pinet6                   uint32 // struct inet_sock
	mc6List                          uint32 // struct ipv6_pinfo
	savedSyn                         uint32 // struct tcp_sock
	mc4Next, mc4Multi, mc4Mode       uint32 // struct ip_mc_socklist
	mc4SF, mc4Len                    uint32
	sf4Count, sf4Addr                uint32 // struct ip_sf_socklist
	mc6Addr, mc6Ifindex, mc6Mode     uint32 // struct ipv6_mc_socklist
	mc6Next, mc6SF, mc6Len           uint32
	sf6Count, sf6Addr                uint32 // struct ip6_sf_socklist
	mreqAddr, mreqIface, mreqIfindex uint32 // struct ip_mreqn
}

func loadSockLayout(s *btf.Spec) (*sockLayout, error) {
	st := map[string]*btf.Struct{}
	for _, n := range []string{"bpf_iter__task_file", "file", "inode", "socket", "sock", "sock_reuseport", "inet_sock", "ipv6_pinfo",
		"tcp_sock", "ip_mc_socklist", "ip_sf_socklist", "ipv6_mc_socklist", "ip6_sf_socklist", "ip_mreqn"} {
		var err error
		if st[n], err = structType(s, n); err != nil {
			return nil, err
		}
	}
	l := &sockLayout{}
	var mc4Multi, multiOff uint32
	if err := setOffsets([]offset{
		{&l.itfFD, st["bpf_iter__task_file"], 4, []string{"fd"}},
		{&l.itfFile, st["bpf_iter__task_file"], 8, []string{"file"}},
		{&l.fInode, st["file"], 8, []string{"f_inode"}},
		{&l.fPrivate, st["file"], 8, []string{"private_data"}},
		{&l.iMode, st["inode"], 2, []string{"i_mode"}},
		{&l.socketSk, st["socket"], 8, []string{"sk"}},
		{&l.family, st["sock"], 2, []string{"__sk_common", "skc_family"}},
		{&l.typ, st["sock"], 2, []string{"sk_type"}},
		{&l.protocol, st["sock"], 2, []string{"sk_protocol"}},
		{&l.reuseportCB, st["sock"], 8, []string{"sk_reuseport_cb"}},
		{&l.policy, st["sock"], 16, []string{"sk_policy"}},
		{&l.cbProg, st["sock_reuseport"], 8, []string{"prog"}},
		{&l.mcList, st["inet_sock"], 8, []string{"mc_list"}},
		{&l.pinet6, st["inet_sock"], 8, []string{"pinet6"}},
		{&l.mc6List, st["ipv6_pinfo"], 8, []string{"ipv6_mc_list"}},
		{&l.savedSyn, st["tcp_sock"], 8, []string{"saved_syn"}},
		{&l.mc4Next, st["ip_mc_socklist"], 8, []string{"next_rcu"}},
		{&mc4Multi, st["ip_mc_socklist"], 12, []string{"multi"}},
		{&l.mc4Mode, st["ip_mc_socklist"], 4, []string{"sfmode"}},
		{&l.mc4SF, st["ip_mc_socklist"], 8, []string{"sflist"}},
		{&l.sf4Count, st["ip_sf_socklist"], 4, []string{"sl_count"}},
		{&l.sf4Addr, st["ip_sf_socklist"], 0, []string{"sl_addr"}},
		{&l.mc6Addr, st["ipv6_mc_socklist"], 16, []string{"addr"}},
		{&l.mc6Ifindex, st["ipv6_mc_socklist"], 4, []string{"ifindex"}},
		{&l.mc6Mode, st["ipv6_mc_socklist"], 4, []string{"sfmode"}},
		{&l.mc6Next, st["ipv6_mc_socklist"], 8, []string{"next"}},
		{&l.mc6SF, st["ipv6_mc_socklist"], 8, []string{"sflist"}},
		{&l.sf6Count, st["ip6_sf_socklist"], 4, []string{"sl_count"}},
		{&l.sf6Addr, st["ip6_sf_socklist"], 0, []string{"sl_addr"}},
		{&multiOff, st["ip_mreqn"], 4, []string{"imr_multiaddr"}},
		{&l.mreqAddr, st["ip_mreqn"], 4, []string{"imr_address"}},
		{&l.mreqIfindex, st["ip_mreqn"], 4, []string{"imr_ifindex"}},
	}); err != nil {
		return nil, err
	}
	if multiOff != 0 {
		return nil, fmt.Errorf("ip_mreqn.imr_multiaddr at %d: %w", multiOff, errLayout)
	}
	l.mc4Multi = mc4Multi
	l.mc4Len = max(l.mc4Next+8, mc4Multi+12, l.mc4Mode+4, l.mc4SF+8)
	l.mc6Len = max(l.mc6Addr+16, l.mc6Ifindex+4, l.mc6Mode+4, l.mc6Next+8, l.mc6SF+8)
	if l.mc4Len > sockNodeMax || l.mc6Len > sockNodeMax {
		return nil, fmt.Errorf("membership list nodes of %d and %d bytes: %w", l.mc4Len, l.mc6Len, errLayout)
	}
	return l, nil
}

// sockProgram builds the iterator program (registers: R7 the file, then
// the sock; R6 the list node walked; R8 the seq_file; R9 the scratch
// element; the stack at -16 a pointer read, -24 a source list, -32 a
// record's size).
func sockProgram(l *sockLayout) asm.Instructions {
	// readTo reads n bytes at src+off into dst (through the stack).
	readTo := func(dst asm.Register, size asm.Size, n int32, src asm.Register, off uint32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Imm(asm.R0, 0), asm.StoreMem(asm.R10, -16, asm.R0, asm.DWord),
			asm.Mov.Reg(asm.R3, src), asm.Add.Imm(asm.R3, int32(off)),
			asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -16),
			asm.Mov.Imm(asm.R2, n),
			asm.FnProbeReadKernel.Call(),
			asm.LoadMem(dst, asm.R10, -16, size),
		}
	}
	// readInto reads n bytes at src+off into the element at at.
	readInto := func(at int32, n int32, src asm.Register, off uint32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R3, src), asm.Add.Imm(asm.R3, int32(off)),
			asm.Mov.Reg(asm.R1, asm.R9), asm.Add.Imm(asm.R1, at),
			asm.Mov.Imm(asm.R2, n),
			asm.FnProbeReadKernel.Call(),
		}
	}
	in := iterStart(int16(l.itfFile), asm.LoadMapPtr(asm.R1, 0).WithReference("sbuf")) // ctx->file
	in = append(in,
		asm.LoadMem(asm.R1, asm.R6, int16(l.itfFD), asm.Word),
		asm.StoreMem(asm.R9, 0, asm.R1, asm.Word),
		asm.StoreImm(asm.R9, 4, recSocket, asm.Word),
	)
	in = append(in, asm.Mov.Imm(asm.R0, 0))
	for off := int16(8); off < sockHdr; off += 8 {
		in = append(in, asm.StoreMem(asm.R9, off, asm.R0, asm.DWord))
	}
	// A socket: its inode is S_IFSOCK and private_data its struct socket.
	in = append(in, readTo(asm.R6, asm.DWord, 8, asm.R7, l.fInode)...)
	in = append(in, asm.JEq.Imm(asm.R6, 0, "out"))
	in = append(in, readTo(asm.R1, asm.Half, 2, asm.R6, l.iMode)...)
	in = append(in, asm.And.Imm(asm.R1, 0xf000), asm.JNE.Imm(asm.R1, 0xc000, "out"))
	in = append(in, readTo(asm.R6, asm.DWord, 8, asm.R7, l.fPrivate)...)
	in = append(in, asm.JEq.Imm(asm.R6, 0, "out"))
	in = append(in, readTo(asm.R7, asm.DWord, 8, asm.R6, l.socketSk)...)
	in = append(in, asm.JEq.Imm(asm.R7, 0, "out"))
	in = append(in, readInto(8, 2, asm.R7, l.family)...)
	in = append(in, readInto(10, 2, asm.R7, l.typ)...)
	in = append(in, readInto(12, 2, asm.R7, l.protocol)...)
	in = append(in,
		asm.LoadMem(asm.R1, asm.R9, 8, asm.Half),
		asm.JEq.Imm(asm.R1, 2, "inet"),  // AF_INET
		asm.JEq.Imm(asm.R1, 10, "inet"), // AF_INET6
		asm.Ja.Label("out"),
	)
	rp := readTo(asm.R6, asm.DWord, 8, asm.R7, l.reuseportCB)
	rp[0] = rp[0].WithSymbol("inet")
	in = append(in, rp...)
	in = append(in, asm.StoreMem(asm.R9, 16, asm.R6, asm.DWord), asm.JEq.Imm(asm.R6, 0, "norp"))
	in = append(in, readInto(24, 8, asm.R6, l.cbProg)...)
	pol := readInto(32, 16, asm.R7, l.policy)
	pol[0] = pol[0].WithSymbol("norp")
	in = append(in, pol...)
	in = append(in,
		asm.LoadMem(asm.R1, asm.R9, 12, asm.Half),
		asm.JNE.Imm(asm.R1, 6, "notcp"), // IPPROTO_TCP
		asm.LoadMem(asm.R1, asm.R9, 10, asm.Half),
		asm.JNE.Imm(asm.R1, 1, "notcp"), // SOCK_STREAM
	)
	in = append(in, readInto(48, 8, asm.R7, l.savedSyn)...)
	in = append(in,
		asm.Mov.Reg(asm.R1, asm.R8).WithSymbol("notcp"),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, sockHdr),
		asm.FnSeqWrite.Call(),
	)
	// walk writes the records of a membership list whose first node
	// R6 points to.
	walk := func(name string, at int32, kind, more int64, nodeLen, next, sf, count, addr uint32, shift int64) asm.Instructions {
		in := asm.Instructions{
			asm.LoadMem(asm.R1, asm.R9, 0, asm.Word),
			asm.StoreMem(asm.R9, int16(at), asm.R1, asm.Word),
			asm.StoreImm(asm.R9, int16(at+4), kind, asm.Word),
			asm.StoreMem(asm.R9, int16(sockTrunc), asm.R1, asm.Word),
			asm.StoreImm(asm.R9, int16(sockTrunc+4), more, asm.Word),
		}
		for i := range sockMaxWalk {
			lbl := func(s string) string { return fmt.Sprintf("%s_%s%d", name, s, i) }
			in = append(in, asm.JEq.Imm(asm.R6, 0, name+"_done"))
			in = append(in, readInto(at+8, int32(nodeLen), asm.R6, 0)...)
			in = append(in,
				asm.StoreImm(asm.R9, int16(at+72), 0, asm.Word),
				asm.LoadMem(asm.R1, asm.R9, int16(at+8+int32(sf)), asm.DWord),
				asm.StoreMem(asm.R10, -24, asm.R1, asm.DWord),
				asm.JEq.Imm(asm.R1, 0, lbl("nosl")),
			)
			in = append(in, readInto(at+72, 4, asm.R1, count)...)
			in = append(in,
				asm.LoadMem(asm.R2, asm.R9, int16(at+72), asm.Word).WithSymbol(lbl("nosl")),
				asm.JLE.Imm(asm.R2, sockMaxSources, lbl("ok")),
				asm.Mov.Imm(asm.R2, sockMaxSources),
				asm.LSh.Imm(asm.R2, int32(shift)).WithSymbol(lbl("ok")),
				asm.StoreMem(asm.R10, -32, asm.R2, asm.DWord),
				asm.LoadMem(asm.R3, asm.R10, -24, asm.DWord),
				asm.Add.Imm(asm.R3, int32(addr)),
				asm.Mov.Reg(asm.R1, asm.R9), asm.Add.Imm(asm.R1, at+sockRecHdr),
				asm.FnProbeReadKernel.Call(),
				asm.LoadMem(asm.R3, asm.R10, -32, asm.DWord),
				asm.Add.Imm(asm.R3, sockRecHdr),
				asm.Mov.Reg(asm.R1, asm.R8),
				asm.Mov.Reg(asm.R2, asm.R9), asm.Add.Imm(asm.R2, at),
				asm.FnSeqWrite.Call(),
				asm.LoadMem(asm.R6, asm.R9, int16(at+8+int32(next)), asm.DWord),
			)
		}
		return append(in,
			asm.JEq.Imm(asm.R6, 0, name+"_done"),
			asm.Mov.Reg(asm.R1, asm.R8),
			asm.Mov.Reg(asm.R2, asm.R9), asm.Add.Imm(asm.R2, sockTrunc),
			asm.Mov.Imm(asm.R3, 8),
			asm.FnSeqWrite.Call(),
		)
	}
	in = append(in, readTo(asm.R6, asm.DWord, 8, asm.R7, l.mcList)...)
	in = append(in, walk("v4", sockV4, recV4, recV4More, l.mc4Len, l.mc4Next, l.mc4SF, l.sf4Count, l.sf4Addr, 2)...)
	v6 := readTo(asm.R1, asm.DWord, 8, asm.R7, l.pinet6)
	v6[0] = v6[0].WithSymbol("v4_done")
	in = append(in, v6...)
	in = append(in, asm.JEq.Imm(asm.R1, 0, "out"))
	in = append(in, readTo(asm.R6, asm.DWord, 8, asm.R1, l.mc6List)...)
	in = append(in, walk("v6", sockV6, recV6, recV6More, l.mc6Len, l.mc6Next, l.mc6SF, l.sf6Count, l.sf6Addr, 4)...)
	return append(in,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("v6_done"),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
}

// OpenSock loads the reader's program. It fails with ErrSockUnavailable
// when the kernel cannot run it. The caller runs Verify before use.
func OpenSock(k *Kernel) (*SockReader, error) {
	spec, cache, err := k.load(ErrSockUnavailable)
	if err != nil {
		return nil, err
	}
	l, err := loadSockLayout(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSockUnavailable, err)
	}
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{"sbuf": {Type: ebpf.Array, KeySize: 4, ValueSize: sockBuf, MaxEntries: 1}},
		Programs: map[string]*ebpf.ProgramSpec{
			"sock": {Name: "ckpt_sockx", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "task_file",
				Instructions: sockProgram(l), License: "GPL"},
		},
	}, ebpf.CollectionOptions{Cache: cache})
	if err != nil {
		return nil, fmt.Errorf("%w: BPF task file iterator program: %v", ErrSockUnavailable, err)
	}
	return &SockReader{l: l, buf: coll.Maps["sbuf"], prog: coll.Programs["sock"]}, nil
}

// Close unloads the program.
func (r *SockReader) Close() {
	r.prog.Close()
	r.buf.Close()
}

// Read reads the extras of every INET socket among ckpt's own fds, by
// fd. The processes that could change them must be stopped.
func (r *SockReader) Read() (map[int]*SockExtra, error) {
	var info [12]byte
	binary.LittleEndian.PutUint32(info[0:], uint32(os.Getpid())) // tid: the main thread, whose fd table is the process's
	out, err := runIter(r.prog, info[:])
	if err != nil {
		return nil, fmt.Errorf("socket state: %w", err)
	}
	return r.decode(out)
}

// decode parses the records the program wrote.
func (r *SockReader) decode(out []byte) (map[int]*SockExtra, error) {
	l := r.l
	m := map[int]*SockExtra{}
	var cur *SockExtra
	for len(out) >= 8 {
		fd, kind := int(u32(out, 0)), u32(out, 4)
		if kind != recSocket && (cur == nil || m[fd] != cur) {
			return nil, fmt.Errorf("socket state: record %d for fd %d out of order: %w", kind, fd, ErrSockMismatch)
		}
		switch kind {
		case recSocket:
			if len(out) < sockHdr {
				return nil, fmt.Errorf("socket state: short header: %w", ErrSockMismatch)
			}
			cur = &SockExtra{
				Family: int(binary.LittleEndian.Uint16(out[8:])), Type: int(binary.LittleEndian.Uint16(out[10:])),
				Protocol:      int(binary.LittleEndian.Uint16(out[12:])),
				ReuseportProg: u64(out, 24) != 0,
				Policy:        [2]bool{u64(out, 32) != 0, u64(out, 40) != 0},
				SavedSYN:      u64(out, 48) != 0,
			}
			m[fd] = cur
			out = out[sockHdr:]
		case recV4, recV6:
			if len(out) < sockRecHdr {
				return nil, fmt.Errorf("socket state: short record: %w", ErrSockMismatch)
			}
			node := out[8 : 8+sockNodeMax]
			count := int(u32(out, 72))
			n := min(count, sockMaxSources)
			width := 4
			if kind == recV6 {
				width = 16
			}
			if len(out) < sockRecHdr+n*width {
				return nil, fmt.Errorf("socket state: short record: %w", ErrSockMismatch)
			}
			if count > sockMaxSources {
				cur.More = true
			}
			var mb Membership
			if kind == recV4 {
				mb.Group = netip.AddrFrom4([4]byte(node[l.mc4Multi:]))
				mb.Address = netip.AddrFrom4([4]byte(node[l.mc4Multi+l.mreqAddr:]))
				mb.Ifindex = int(int32(u32(node, l.mc4Multi+l.mreqIfindex)))
				mb.Include = u32(node, l.mc4Mode) == 1 // MCAST_INCLUDE
			} else {
				mb.Group = netip.AddrFrom16([16]byte(node[l.mc6Addr:]))
				mb.Ifindex = int(int32(u32(node, l.mc6Ifindex)))
				mb.Include = u32(node, l.mc6Mode) == 1
			}
			for i := range n {
				src := out[sockRecHdr+i*width:]
				if kind == recV4 {
					mb.Sources = append(mb.Sources, netip.AddrFrom4([4]byte(src)))
				} else {
					mb.Sources = append(mb.Sources, netip.AddrFrom16([16]byte(src)))
				}
			}
			cur.Memberships = append(cur.Memberships, mb)
			out = out[sockRecHdr+n*width:]
		case recV4More, recV6More:
			cur.More = true
			out = out[8:]
		default:
			return nil, fmt.Errorf("socket state: record kind %d: %w", kind, ErrSockMismatch)
		}
	}
	return m, nil
}

package bpftask

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// The UNIX accept queue reader reads what a connection waiting in a
// UNIX listener's accept queue holds and nothing but accept() reaches:
// unix_stream_connect made a server-side socket for it (the "embryo":
// no struct socket, no file, queued in the listener's receive queue),
// into whose receive queue the client's sends go, and which keeps the
// connecting process and its credentials (sk_peer_pid, sk_peer_cred:
// what SO_PEERCRED will say on the accepted end). An accept cannot be
// undone, so the reader walks the kernel's structures instead, with the
// two programs of unixprog.go and the offsets of the kernel's BTF; it is
// trusted only once Verify read connections it made itself with known
// data the same way.

var (
	// ErrUnixUnavailable means the kernel cannot run the UNIX accept
	// queue reader: no BTF, no BPF UNIX socket iterator, not allowed, or
	// ckpt is not in the initial PID and user namespaces (whose numbers
	// the kernel's structures hold).
	ErrUnixUnavailable = errors.New("BPF UNIX accept queue reader unavailable")
	// ErrUnixUnreadable means a waiting connection holds what the reader
	// does not read: files in flight (SCM_RIGHTS), out-of-band data, a
	// piece of a queued message out of its reach.
	ErrUnixUnreadable = errors.New("a connection waiting in a UNIX accept queue holds what cannot be read back")
	// ErrUnixChanged means the kernel's structures changed while they
	// were read (a connection came or went), or are not what the reader
	// expects.
	ErrUnixChanged = errors.New("UNIX accept queue changed while read")
)

// UnixConn is a connection waiting in a UNIX listener's accept queue, as
// its server end holds it.
type UnixConn struct {
	// Client is the inode of the client socket; 0 if it was closed.
	Client uint32
	// ClientName is, for a closed client, the name it was bound to
	// ("" none, "@..." abstract): getpeername on the accepted end gives
	// it.
	ClientName string
	// Msgs are what the client sent, in the pieces the kernel queued
	// (one per send, or per part of a large one).
	Msgs []UnixQueued
	// Peer is what SO_PEERCRED and SO_PEERGROUPS will say on the
	// accepted end: the process that connected, its effective ids and
	// groups then.
	Peer PeerCred
	// Shutdown is the server end's sk_shutdown (3 once the client
	// closed), Err its pending error.
	Shutdown int
	Err      int
}

// UnixQueued is one piece queued in a waiting connection: its bytes and
// the credentials it carries (the kernel attaches the sender's to every
// piece sent to a socket without a file: PID 0 only if none).
type UnixQueued struct {
	Data     []byte
	PID      int
	UID, GID uint32
}

// PeerCred is a process and its effective ids and groups, as a socket
// keeps them.
type PeerCred struct {
	PID      int
	UID, GID uint32
	Groups   []uint32
}

// UnixReader reads the accept queues of UNIX listeners.
type UnixReader struct {
	l *unixLayout
	p *unixProgs
	// The direct map and the struct page array (x86-64), to read the
	// pages of paged pieces; pagedOK once Verify found them.
	pageOffset, vmemmap uint64
	pagedOK             bool
}

// OpenUnix loads the reader's programs. It fails with ErrUnixUnavailable
// when the kernel cannot run them. The caller runs Verify before use.
func OpenUnix() (*UnixReader, error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("%w: no kernel BTF (/sys/kernel/btf/vmlinux): %v", ErrUnixUnavailable, err)
	}
	if err := initialNamespaces(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnixUnavailable, err)
	}
	cache := btf.NewCache()
	spec, err := cache.Kernel()
	if err != nil {
		return nil, fmt.Errorf("%w: kernel BTF: %v", ErrUnixUnavailable, err)
	}
	l, err := loadUnixLayout(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnixUnavailable, err)
	}
	p, err := loadUnixProgs(l, cache)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnixUnavailable, err)
	}
	return &UnixReader{l: l, p: p}, nil
}

// initialNamespaces checks that ckpt is in the initial PID and user
// namespaces: the reader decodes PIDs and ids as the kernel keeps them
// (struct pid's first number, kuid_t), which are ckpt's then.
func initialNamespaces() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "NSpid:" && len(f) != 2 {
			return fmt.Errorf("ckpt runs in a PID namespace (%s)", line)
		}
	}
	m, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return err
	}
	if f := strings.Fields(string(m)); len(f) != 3 || f[0] != "0" || f[1] != "0" || f[2] != "4294967295" {
		return fmt.Errorf("ckpt runs in a user namespace (uid_map %q)", strings.TrimSpace(string(m)))
	}
	return nil
}

// Close unloads the programs.
func (r *UnixReader) Close() { r.p.Close() }

// sockets lists the UNIX sockets of the caller's network namespace: the
// address of each by inode.
func (r *UnixReader) sockets() (map[uint32]uint64, error) {
	out, err := runIter(r.p.table, nil)
	if err != nil {
		return nil, fmt.Errorf("UNIX sockets: %w", err)
	}
	m := map[uint32]uint64{}
	for ; len(out) >= 16; out = out[16:] {
		if ino := binary.LittleEndian.Uint64(out[8:]); ino != 0 {
			m[uint32(ino)] = binary.LittleEndian.Uint64(out)
		}
	}
	return m, nil
}

// memReq is a piece of kernel memory to read.
type memReq struct {
	addr uint64
	size uint32
}

// read reads pieces of kernel memory (each at most memSlot bytes).
func (r *UnixReader) read(reqs ...memReq) ([][]byte, error) {
	var out [][]byte
	var info [16]byte
	binary.LittleEndian.PutUint32(info[0:], uint32(os.Getpid()))
	for len(reqs) > 0 {
		batch := reqs[:min(len(reqs), memSlots)]
		reqs = reqs[len(batch):]
		var v [memSlots * 16]byte
		for i, q := range batch {
			if q.size > memSlot {
				return nil, fmt.Errorf("read of %d bytes", q.size)
			}
			binary.LittleEndian.PutUint64(v[i*16:], q.addr)
			binary.LittleEndian.PutUint64(v[i*16+8:], uint64(q.size))
		}
		for i := len(batch); i < memSlots; i++ {
			binary.LittleEndian.PutUint64(v[i*16+8:], memSlot+1) // skipped
		}
		if err := r.p.mreq.Put(uint32(0), v[:]); err != nil {
			return nil, fmt.Errorf("BPF map: %w", err)
		}
		b, err := runIter(r.p.mem, info[:])
		if err != nil {
			return nil, fmt.Errorf("kernel memory: %w", err)
		}
		if len(b) != memOut {
			return nil, fmt.Errorf("kernel memory: %d bytes, want %d", len(b), memOut)
		}
		for i, q := range batch {
			if rc := int64(binary.LittleEndian.Uint64(b[i*8:])); rc != 0 {
				return nil, fmt.Errorf("kernel memory at %#x (%d bytes): error %d: %w", q.addr, q.size, rc, ErrUnixChanged)
			}
			out = append(out, b[memHdr+i*memSlot:memHdr+i*memSlot+int(q.size)])
		}
	}
	return out, nil
}

// readLong reads n bytes at addr, in as many pieces as it takes.
func (r *UnixReader) readLong(addr uint64, n int) ([]byte, error) {
	var reqs []memReq
	for off := 0; off < n; off += memSlot {
		reqs = append(reqs, memReq{addr + uint64(off), uint32(min(memSlot, n-off))})
	}
	parts, err := r.read(reqs...)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, nil
}

func (r *UnixReader) read1(addr uint64, size uint32) ([]byte, error) {
	if size > memSlot {
		return r.readLong(addr, int(size))
	}
	b, err := r.read(memReq{addr, size})
	if err != nil {
		return nil, err
	}
	return b[0], nil
}

func u64(b []byte, off uint32) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
func u32(b []byte, off uint32) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

// maxWalk bounds the lists walked (a listener's backlog, a queue's
// pieces): a longer one is taken for a list that changed under the
// reader.
const maxWalk = 1 << 16

// AcceptQueue reads the connections waiting in the accept queue of the
// UNIX listener whose inode is listener, in the order accept() takes
// them. The listener must be in the caller's network namespace, and the
// processes that can change its queue (its clients, itself) stopped.
func (r *UnixReader) AcceptQueue(listener uint32) ([]UnixConn, error) {
	socks, err := r.sockets()
	if err != nil {
		return nil, err
	}
	lsk, ok := socks[listener]
	if !ok {
		return nil, fmt.Errorf("UNIX listener %d not found by the BPF socket iterator: %w", listener, ErrUnixChanged)
	}
	l := r.l
	ls, err := r.read1(lsk, l.unixSockSize)
	if err != nil {
		return nil, err
	}
	if ls[l.state] != 10 { // TCP_LISTEN
		return nil, fmt.Errorf("UNIX socket %d is not listening (state %d): %w", listener, ls[l.state], ErrUnixChanged)
	}
	head := lsk + uint64(l.rq)
	var conns []UnixConn
	for skb, n := u64(ls, l.rq), 0; skb != head; n++ {
		if n > maxWalk || skb == 0 {
			return nil, fmt.Errorf("UNIX listener %d: its queue does not end: %w", listener, ErrUnixChanged)
		}
		h, err := r.read1(skb, l.skbSize)
		if err != nil {
			return nil, err
		}
		c, err := r.embryo(u64(h, l.skbSk))
		if err != nil {
			return nil, fmt.Errorf("connection %d waiting in the queue of UNIX listener %d: %w", n+1, listener, err)
		}
		conns = append(conns, c)
		skb = u64(h, l.skbNext)
	}
	if q := u32(ls, l.rq+16); int(q) != len(conns) {
		return nil, fmt.Errorf("UNIX listener %d: %d connections found, its queue says %d: %w", listener, len(conns), q, ErrUnixChanged)
	}
	return conns, nil
}

// embryo reads the server end of a waiting connection at sk.
func (r *UnixReader) embryo(sk uint64) (UnixConn, error) {
	l := r.l
	var c UnixConn
	e, err := r.read1(sk, l.unixSockSize)
	if err != nil {
		return c, err
	}
	if u64(e, l.socket) != 0 {
		return c, fmt.Errorf("its server end has a socket already: %w", ErrUnixChanged)
	}
	c.Shutdown, c.Err = int(e[l.shutdown]), int(int32(u32(e, l.err)))
	if l.hasOOB && u64(e, l.oob) != 0 {
		return c, fmt.Errorf("out-of-band data (MSG_OOB) queued: %w", ErrUnixUnreadable)
	}
	if c.Peer, err = r.cred(u64(e, l.peerPID), u64(e, l.peerCred)); err != nil {
		return c, fmt.Errorf("its peer credentials: %w", err)
	}
	if peer := u64(e, l.peer); peer != 0 {
		cs, err := r.read1(peer, l.unixSockSize)
		if err != nil {
			return c, err
		}
		if sock := u64(cs, l.socket); sock != 0 {
			ino, err := r.read1(sock+uint64(l.inode), 8)
			if err != nil {
				return c, err
			}
			c.Client = uint32(u64(ino, 0))
			if c.Client == 0 {
				return c, fmt.Errorf("its client has inode 0: %w", ErrUnixChanged)
			}
		} else if addr := u64(cs, l.addr); addr != 0 {
			if c.ClientName, err = r.unixName(addr); err != nil {
				return c, fmt.Errorf("the name of its closed client: %w", err)
			}
		}
	}
	head := sk + uint64(l.rq)
	for skb, n := u64(e, l.rq), 0; skb != head; n++ {
		if n > maxWalk || skb == 0 {
			return c, fmt.Errorf("its queue does not end: %w", ErrUnixChanged)
		}
		h, err := r.read1(skb, l.skbSize)
		if err != nil {
			return c, err
		}
		m, err := r.piece(h)
		if err != nil {
			return c, fmt.Errorf("piece %d of its queue: %w", n+1, err)
		}
		c.Msgs = append(c.Msgs, m)
		skb = u64(h, l.skbNext)
	}
	if q := u32(e, l.rq+16); int(q) != len(c.Msgs) {
		return c, fmt.Errorf("%d pieces found, its queue says %d: %w", len(c.Msgs), q, ErrUnixChanged)
	}
	return c, nil
}

// piece reads one queued sk_buff (h: the struct).
func (r *UnixReader) piece(h []byte) (UnixQueued, error) {
	l := r.l
	var m UnixQueued
	cb := h[l.skbCB:]
	if u64(cb, l.cbFP) != 0 {
		return m, fmt.Errorf("files in flight (SCM_RIGHTS): %w", ErrUnixUnreadable)
	}
	if u32(cb, l.cbConsumed) != 0 {
		return m, fmt.Errorf("partly read: %w", ErrUnixChanged)
	}
	size, paged := u32(h, l.skbLen), u32(h, l.skbDataLen)
	if paged > size || size > 64<<20 {
		return m, fmt.Errorf("%d bytes, %d of them paged: %w", size, paged, ErrUnixChanged)
	}
	var err error
	if m.Data, err = r.readLong(u64(h, l.skbData), int(size-paged)); err != nil {
		return m, err
	}
	if paged > 0 {
		rest, err := r.pages(h, paged)
		if err != nil {
			return m, err
		}
		m.Data = append(m.Data, rest...)
	}
	if pid := u64(cb, l.cbPID); pid != 0 {
		if m.PID, err = r.pidNr(pid); err != nil {
			return m, err
		}
		m.UID, m.GID = u32(cb, l.cbUID), u32(cb, l.cbGID)
	}
	return m, nil
}

// pages reads the paged part of a piece (n bytes in the page fragments
// of its struct skb_shared_info, at head + end).
func (r *UnixReader) pages(h []byte, n uint32) ([]byte, error) {
	l := r.l
	if !r.pagedOK {
		return nil, fmt.Errorf("%d bytes in pages, which this kernel's reader cannot find: %w", n, ErrUnixUnreadable)
	}
	sh, err := r.read1(u64(h, l.skbHead)+uint64(u32(h, l.skbEnd)), l.shinfoFrags)
	if err != nil {
		return nil, err
	}
	if u64(sh, l.shinfoFragList) != 0 {
		return nil, fmt.Errorf("a fragment list: %w", ErrUnixUnreadable)
	}
	nr := uint32(sh[l.shinfoNrFrags])
	fr, err := r.read1(u64(h, l.skbHead)+uint64(u32(h, l.skbEnd))+uint64(l.shinfoFrags), nr*l.fragSize)
	if err != nil {
		return nil, err
	}
	var out []byte
	for i := range nr {
		f := fr[i*l.fragSize:]
		page, size, off := u64(f, l.fragNetmem), u32(f, l.fragLen), u32(f, l.fragOff)
		if page&1 != 0 || page < r.vmemmap {
			return nil, fmt.Errorf("a fragment not in a page: %w", ErrUnixUnreadable)
		}
		addr := r.pageOffset + (page-r.vmemmap)/uint64(l.pageSize)*4096 + uint64(off)
		b, err := r.readLong(addr, int(size))
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	if uint32(len(out)) != n {
		return nil, fmt.Errorf("%d bytes in pages, %d found: %w", n, len(out), ErrUnixChanged)
	}
	return out, nil
}

// unixName decodes the struct unix_address at addr: its sockaddr_un.
func (r *UnixReader) unixName(addr uint64) (string, error) {
	b, err := r.read1(addr, r.l.addrName)
	if err != nil {
		return "", err
	}
	n := int32(u32(b, r.l.addrLen))
	if n <= 2 || n > 110 {
		return "", fmt.Errorf("a name of %d bytes: %w", n, ErrUnixChanged)
	}
	sa, err := r.read1(addr+uint64(r.l.addrName), uint32(n))
	if err != nil {
		return "", err
	}
	path := sa[2:]
	if path[0] == 0 {
		return "@" + string(path[1:]), nil
	}
	if i := bytes.IndexByte(path, 0); i >= 0 {
		path = path[:i]
	}
	return string(path), nil
}

// pidNr is the number of the struct pid at p in the initial namespace.
func (r *UnixReader) pidNr(p uint64) (int, error) {
	b, err := r.read1(p, r.l.pidNumbers+r.l.upidSize)
	if err != nil {
		return 0, err
	}
	return int(int32(u32(b, r.l.pidNumbers))), nil
}

// cred decodes a socket's peer process and credentials.
func (r *UnixReader) cred(pid, cred uint64) (PeerCred, error) {
	var c PeerCred
	var err error
	if pid != 0 {
		if c.PID, err = r.pidNr(pid); err != nil {
			return c, err
		}
	}
	if cred == 0 {
		return c, nil
	}
	l := r.l
	b, err := r.read1(cred, max(l.credEUID, l.credEGID, l.credGroups)+8)
	if err != nil {
		return c, err
	}
	c.UID, c.GID = u32(b, l.credEUID), u32(b, l.credEGID)
	gi := u64(b, l.credGroups)
	if gi == 0 {
		return c, nil
	}
	g, err := r.read1(gi, l.groupsGID)
	if err != nil {
		return c, err
	}
	n := int32(u32(g, l.groupsN))
	if n < 0 || n > 65536 {
		return c, fmt.Errorf("%d groups: %w", n, ErrUnixChanged)
	}
	if n == 0 {
		return c, nil
	}
	gids, err := r.readLong(gi+uint64(l.groupsGID), int(n)*4)
	if err != nil {
		return c, err
	}
	for i := range int(n) {
		c.Groups = append(c.Groups, u32(gids, uint32(i*4)))
	}
	return c, nil
}

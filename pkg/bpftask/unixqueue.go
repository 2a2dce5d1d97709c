package bpftask

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
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
	// ErrUnixUnavailable means the kernel cannot run the UNIX reader
	// (accept queues, stream pieces): no BTF, no BPF UNIX socket iterator, not allowed, or
	// ckpt is not in the initial PID and user namespaces (whose numbers
	// the kernel's structures hold).
	ErrUnixUnavailable = errors.New("BPF UNIX socket queue reader unavailable")
	// ErrUnixUnreadable means a waiting connection holds what the reader
	// does not read: files in flight (SCM_RIGHTS), out-of-band data, a
	// piece of a queued message out of its reach.
	ErrUnixUnreadable = errors.New("a connection waiting in a UNIX accept queue holds what cannot be read back")
	// ErrUnixChanged means the kernel's structures changed while they
	// were read (a connection or a piece came or went), or are not what
	// the reader expects.
	ErrUnixChanged = errors.New("UNIX socket queue changed while read")
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
	// Files are the files in flight attached to it (SCM_RIGHTS), in
	// order: each the processes and fds that hold the same open file
	// description (none: no process holds it).
	Files [][]FileHolder
	files []uint64 // their struct file addresses
}

// FileHolder is a process's fd of an open file description.
type FileHolder struct {
	PID, FD int
}

// PeerCred is a process and its effective ids and groups, as a socket
// keeps them.
type PeerCred struct {
	PID      int
	UID, GID uint32
	Groups   []uint32
}

// UnixReader reads the accept queues of UNIX listeners (AcceptQueue)
// and where the pieces of UNIX streams' receive queues start (Pieces).
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
func OpenUnix(k *Kernel) (*UnixReader, error) {
	if err := initialNamespaces(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnixUnavailable, err)
	}
	spec, cache, err := k.load(ErrUnixUnavailable)
	if err != nil {
		return nil, err
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

// socket finds the UNIX socket whose inode is ino (in the caller's
// network namespace): its address and its struct unix_sock.
func (r *UnixReader) socket(ino uint32) (uint64, []byte, error) {
	socks, err := r.sockets()
	if err != nil {
		return 0, nil, err
	}
	sk, ok := socks[ino]
	if !ok {
		return 0, nil, fmt.Errorf("not found by the BPF socket iterator: %w", ErrUnixChanged)
	}
	s, err := r.read1(sk, r.l.unixSockSize)
	if err != nil {
		return 0, nil, err
	}
	return sk, s, nil
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
			lo, hi := memHdr+i*memSlot, memHdr+i*memSlot+int(q.size)
			out = append(out, b[lo:hi:hi]) // an append to it copies
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
//
// Reads that do not depend on each other run together (batch): the
// listener's queue is walked one connection per round while what each
// connection found holds is read alongside.
func (r *UnixReader) AcceptQueue(listener uint32) ([]UnixConn, error) {
	lsk, ls, err := r.socket(listener)
	if err != nil {
		return nil, fmt.Errorf("UNIX listener %d: %w", listener, err)
	}
	l := r.l
	if ls[l.state] != 10 { // TCP_LISTEN
		return nil, fmt.Errorf("UNIX socket %d is not listening (state %d): %w", listener, ls[l.state], ErrUnixChanged)
	}
	qlen, err := queueLen(l, ls)
	if err != nil {
		return nil, fmt.Errorf("UNIX listener %d: %w", listener, err)
	}
	conns := make([]UnixConn, qlen)
	b := &batch{r: r}
	r.walkQueue(b, lsk, ls, qlen, func(n int, h []byte) {
		r.embryo(b, u64(h, l.skbSk), &conns[n], func(err error) {
			b.fail(fmt.Errorf("connection %d waiting in the queue of UNIX listener %d: %w", n+1, listener, err))
		})
	}, func(err error) { b.fail(fmt.Errorf("UNIX listener %d: %w", listener, err)) })
	if err := b.run(); err != nil {
		return nil, err
	}
	if err := r.holders(conns); err != nil {
		return nil, err
	}
	return conns, nil
}

// holders finds the holders of the files in flight of conns: every fd
// of every process (the task file iterator) whose open file description
// is one of them.
func (r *UnixReader) holders(conns []UnixConn) error {
	want := map[uint64][]*[]FileHolder{}
	for i := range conns {
		for j := range conns[i].Msgs {
			m := &conns[i].Msgs[j]
			for k, f := range m.files {
				want[f] = append(want[f], &m.Files[k])
			}
		}
	}
	if len(want) == 0 {
		return nil
	}
	out, err := runIter(r.p.files, nil)
	if err != nil {
		return fmt.Errorf("open files: %w", err)
	}
	for ; len(out) >= 16; out = out[16:] {
		tgid, fd, f := u32(out, 0), u32(out, 4), u64(out, 8)
		for _, h := range want[f] {
			if !slices.Contains(*h, FileHolder{int(tgid), int(fd)}) {
				*h = append(*h, FileHolder{int(tgid), int(fd)})
			}
		}
	}
	return nil
}

// embryo reads the server end of a waiting connection at sk into c.
func (r *UnixReader) embryo(b *batch, sk uint64, c *UnixConn, fail func(error)) {
	l := r.l
	b.get(sk, int(l.unixSockSize), func(e []byte) {
		if u64(e, l.socket) != 0 {
			fail(fmt.Errorf("its server end has a socket already: %w", ErrUnixChanged))
			return
		}
		c.Shutdown, c.Err = int(e[l.shutdown]), int(int32(u32(e, l.err)))
		if l.hasOOB && u64(e, l.oob) != 0 {
			fail(fmt.Errorf("out-of-band data (MSG_OOB) queued: %w", ErrUnixUnreadable))
			return
		}
		r.cred(b, u64(e, l.peerPID), u64(e, l.peerCred), &c.Peer, func(err error) { fail(fmt.Errorf("its peer credentials: %w", err)) })
		if peer := u64(e, l.peer); peer != 0 {
			b.get(peer, int(l.unixSockSize), func(cs []byte) {
				if sock := u64(cs, l.socket); sock != 0 {
					b.get(sock+uint64(l.inode), 8, func(ino []byte) {
						if c.Client = uint32(u64(ino, 0)); c.Client == 0 {
							fail(fmt.Errorf("its client has inode 0: %w", ErrUnixChanged))
						}
					})
				} else if addr := u64(cs, l.addr); addr != 0 {
					r.unixName(b, addr, &c.ClientName, func(err error) { fail(fmt.Errorf("the name of its closed client: %w", err)) })
				}
			})
		}
		qlen, err := queueLen(l, e)
		if err != nil {
			fail(err)
			return
		}
		c.Msgs = make([]UnixQueued, qlen)
		r.walkQueue(b, sk, e, qlen, func(n int, h []byte) {
			r.piece(b, h, &c.Msgs[n], func(err error) { fail(fmt.Errorf("piece %d of its queue: %w", n+1, err)) })
		}, fail)
	})
}

// queueLen is how many sk_buffs the receive queue of the socket s (its
// struct unix_sock) counts.
func queueLen(l *unixLayout, s []byte) (int, error) {
	qlen := int(u32(s, l.rq+16))
	if qlen > maxWalk {
		return 0, fmt.Errorf("%d queued in its receive queue: %w", qlen, ErrUnixChanged)
	}
	return qlen, nil
}

// walkQueue walks the receive queue of the socket at sk (s: its struct
// unix_sock), which counts qlen sk_buffs: each gets every one of them
// (n from 0, the struct sk_buff) as the batch reads it, one a round. A
// list that does not hold qlen fails.
func (r *UnixReader) walkQueue(b *batch, sk uint64, s []byte, qlen int, each func(n int, skb []byte), fail func(error)) {
	head := sk + uint64(r.l.rq)
	var walk func(skb uint64, n int)
	walk = func(skb uint64, n int) {
		switch {
		case skb == head && n == qlen:
			return
		case skb == head || skb == 0 || n >= qlen:
			fail(fmt.Errorf("its receive queue does not hold the %d it counts: %w", qlen, ErrUnixChanged))
			return
		}
		b.get(skb, int(r.l.skbSize), func(h []byte) {
			each(n, h)
			walk(u64(h, r.l.skbNext), n+1)
		})
	}
	walk(u64(s, r.l.rq), 0)
}

// inFlight reads the files in flight of a queued sk_buff (fp: its
// UNIXCB(skb).fp, a struct scm_fp_list): then gets how many, and with
// addrs their struct file addresses.
func (r *UnixReader) inFlight(b *batch, fp uint64, addrs bool, then func(n int, files []uint64), fail func(error)) {
	l := r.l
	b.get(fp, int(l.fpFiles), func(h []byte) {
		n := int(int16(binary.LittleEndian.Uint16(h[l.fpCount:])))
		if n <= 0 || n > 253 {
			fail(fmt.Errorf("%d files in flight: %w", n, ErrUnixChanged))
			return
		}
		if !addrs {
			then(n, nil)
			return
		}
		b.get(fp+uint64(l.fpFiles), n*8, func(f []byte) {
			files := make([]uint64, n)
			for i := range files {
				files[i] = u64(f, uint32(i*8))
			}
			then(n, files)
		})
	})
}

// piece reads one queued sk_buff (h: the struct) into m.
func (r *UnixReader) piece(b *batch, h []byte, m *UnixQueued, fail func(error)) {
	l := r.l
	cb := h[l.skbCB:]
	if fp := u64(cb, l.cbFP); fp != 0 {
		r.inFlight(b, fp, true, func(n int, files []uint64) {
			m.Files, m.files = make([][]FileHolder, n), files
		}, fail)
	}
	if u32(cb, l.cbConsumed) != 0 {
		fail(fmt.Errorf("partly read: %w", ErrUnixChanged))
		return
	}
	size, paged := u32(h, l.skbLen), u32(h, l.skbDataLen)
	if paged > size || size > 64<<20 {
		fail(fmt.Errorf("%d bytes, %d of them paged: %w", size, paged, ErrUnixChanged))
		return
	}
	var linear, rest []byte
	pending := 1
	done := func() {
		if pending--; pending == 0 {
			m.Data = append(append(make([]byte, 0, size), linear...), rest...)
		}
	}
	if paged > 0 {
		pending++
		r.pages(b, h, paged, func(p []byte) { rest = p; done() }, fail)
	}
	b.get(u64(h, l.skbData), int(size-paged), func(p []byte) { linear = p; done() })
	if pid := u64(cb, l.cbPID); pid != 0 {
		m.UID, m.GID = u32(cb, l.cbUID), u32(cb, l.cbGID)
		r.pidNr(b, pid, func(nr int) { m.PID = nr })
	}
}

// pages reads the paged part of a piece (n bytes in the page fragments
// of its struct skb_shared_info, at head + end).
func (r *UnixReader) pages(b *batch, h []byte, n uint32, then func([]byte), fail func(error)) {
	l := r.l
	if !r.pagedOK {
		fail(fmt.Errorf("%d bytes in pages, which this kernel's reader cannot find: %w", n, ErrUnixUnreadable))
		return
	}
	shinfo := u64(h, l.skbHead) + uint64(u32(h, l.skbEnd))
	b.get(shinfo, int(l.shinfoFrags), func(sh []byte) {
		if u64(sh, l.shinfoFragList) != 0 {
			fail(fmt.Errorf("a fragment list: %w", ErrUnixUnreadable))
			return
		}
		nr := uint32(sh[l.shinfoNrFrags])
		b.get(shinfo+uint64(l.shinfoFrags), int(nr*l.fragSize), func(fr []byte) {
			parts := make([][]byte, nr)
			pending := int(nr)
			for i := range nr {
				f := fr[i*l.fragSize:]
				page, size, off := u64(f, l.fragNetmem), u32(f, l.fragLen), u32(f, l.fragOff)
				if page&1 != 0 || page < r.vmemmap {
					fail(fmt.Errorf("a fragment not in a page: %w", ErrUnixUnreadable))
					return
				}
				addr := r.pageOffset + (page-r.vmemmap)/uint64(l.pageSize)*4096 + uint64(off)
				b.get(addr, int(size), func(p []byte) {
					parts[i] = p
					if pending--; pending > 0 {
						return
					}
					out := bytes.Join(parts, nil)
					if uint32(len(out)) != n {
						fail(fmt.Errorf("%d bytes in pages, %d found: %w", n, len(out), ErrUnixChanged))
						return
					}
					then(out)
				})
			}
			if nr == 0 {
				fail(fmt.Errorf("%d bytes in pages, no fragment: %w", n, ErrUnixChanged))
			}
		})
	})
}

// unixName decodes the struct unix_address at addr (its sockaddr_un)
// into name.
func (r *UnixReader) unixName(b *batch, addr uint64, name *string, fail func(error)) {
	b.get(addr, int(r.l.addrName), func(h []byte) {
		n := int32(u32(h, r.l.addrLen))
		if n <= 2 || n > 110 {
			fail(fmt.Errorf("a name of %d bytes: %w", n, ErrUnixChanged))
			return
		}
		b.get(addr+uint64(r.l.addrName), int(n), func(sa []byte) {
			path := sa[2:]
			if path[0] == 0 {
				*name = "@" + string(path[1:])
				return
			}
			if i := bytes.IndexByte(path, 0); i >= 0 {
				path = path[:i]
			}
			*name = string(path)
		})
	})
}

// pidNr gives the number of the struct pid at p in the initial
// namespace.
func (r *UnixReader) pidNr(b *batch, p uint64, then func(int)) {
	b.get(p, int(r.l.pidNumbers+r.l.upidSize), func(h []byte) { then(int(int32(u32(h, r.l.pidNumbers)))) })
}

// cred decodes a socket's peer process and credentials into c.
func (r *UnixReader) cred(b *batch, pid, cred uint64, c *PeerCred, fail func(error)) {
	if pid != 0 {
		r.pidNr(b, pid, func(nr int) { c.PID = nr })
	}
	if cred == 0 {
		return
	}
	l := r.l
	b.get(cred, int(max(l.credEUID, l.credEGID, l.credGroups)+8), func(h []byte) {
		c.UID, c.GID = u32(h, l.credEUID), u32(h, l.credEGID)
		gi := u64(h, l.credGroups)
		if gi == 0 {
			return
		}
		b.get(gi, int(l.groupsGID), func(g []byte) {
			n := int32(u32(g, l.groupsN))
			if n < 0 || n > 65536 {
				fail(fmt.Errorf("%d groups: %w", n, ErrUnixChanged))
				return
			}
			b.get(gi+uint64(l.groupsGID), int(n)*4, func(gids []byte) {
				for i := range int(n) {
					c.Groups = append(c.Groups, u32(gids, uint32(i*4)))
				}
			})
		})
	})
}

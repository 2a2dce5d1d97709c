package bpftask

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// The TCP lock reader reads what nothing but the kernel's struct sock
// shows of a TCP socket: sk_userlocks, whose SOCK_BINDPORT_LOCK says
// that the program bound the socket's port (bind with a port, or bind
// with port 0 before connect) and that the socket keeps it when its
// connection ends; a port chosen by connect is given back then. A TCP
// socket iterator (iter/tcp) writes, for every full socket of the
// network namespace it is opened in (request and TIME_WAIT sockets are
// skipped), its cookie (SO_COOKIE) and sk_userlocks. It is trusted only
// once Verify read sockets it made itself the same way.

// Bits of sk_userlocks.
const (
	// LockBindAddr (SOCK_BINDADDR_LOCK) is set when the program bound
	// the socket to an address other than the wildcard.
	LockBindAddr = 4
	// LockBindPort (SOCK_BINDPORT_LOCK) is set when the program bound
	// the socket's port: it keeps it after its connection ends.
	LockBindPort = 8
)

var (
	// ErrTCPUnavailable means the kernel cannot run the TCP lock
	// reader: no BTF, no BPF TCP iterator, or not allowed.
	ErrTCPUnavailable = errors.New("BPF TCP lock reader unavailable")
	// ErrTCPMismatch means the reader read sockets Verify made
	// otherwise than they were made: it must not be used.
	ErrTCPMismatch = errors.New("BPF TCP lock reader does not read what the sockets were made with")
)

// TCP states (sk_state) that are not full sockets.
const (
	tcpTimeWait   = 6
	tcpNewSynRecv = 12
)

// TCPReader reads the sk_userlocks of TCP sockets (Locks) and the socket
// layer state of ckpt's own sockets (SockState, tcpsockstate.go): one
// collection, loaded once.
type TCPReader struct {
	buf, sbuf    *ebpf.Map
	prog, states *ebpf.Program
}

// tcpLayout holds the offsets (bytes) the program reads.
type tcpLayout struct {
	iterSk           uint32 // bpf_iter__tcp.sk_common
	state, userlocks uint32 // in struct sock
}

func loadTCPLayout(s *btf.Spec) (*tcpLayout, error) {
	it, err := structType(s, "bpf_iter__tcp")
	if err != nil {
		return nil, fmt.Errorf("no BPF TCP socket iterator: %w", err)
	}
	sk, err := structType(s, "sock")
	if err != nil {
		return nil, err
	}
	l := &tcpLayout{}
	if err := setOffsets([]offset{
		{&l.iterSk, it, 8, []string{"sk_common"}},
		{&l.state, sk, 1, []string{"__sk_common", "skc_state"}},
		{&l.userlocks, sk, 1, []string{"sk_userlocks"}},
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// tcpProgram builds the iterator program: 16 bytes a socket, its cookie
// then its sk_userlocks.
func tcpProgram(l *tcpLayout) asm.Instructions {
	read := func(dst int16, size int32, off uint32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R9), asm.Add.Imm(asm.R1, int32(dst)),
			asm.Mov.Imm(asm.R2, size),
			asm.Mov.Reg(asm.R3, asm.R7), asm.Add.Imm(asm.R3, int32(off)),
			asm.FnProbeReadKernel.Call(),
		}
	}
	in := append(iterStart(int16(l.iterSk), asm.LoadMapPtr(asm.R1, 0).WithReference("kbuf")), // ctx->sk_common
		asm.Mov.Imm(asm.R0, 0),
		asm.StoreMem(asm.R9, 0, asm.R0, asm.DWord),
		asm.StoreMem(asm.R9, 8, asm.R0, asm.DWord),
	)
	in = append(in, read(8, 1, l.state)...)
	in = append(in,
		asm.LoadMem(asm.R1, asm.R9, 8, asm.Byte),
		asm.JEq.Imm(asm.R1, tcpTimeWait, "out"),
		asm.JEq.Imm(asm.R1, tcpNewSynRecv, "out"),
	)
	// bpf_get_socket_cookie gives the socket a cookie if it had none,
	// as SO_COOKIE would.
	in = append(in,
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.R9, 0, asm.R0, asm.DWord),
	)
	in = append(in, read(9, 1, l.userlocks)...)
	return append(in,
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, 16),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
}

// OpenTCP loads the reader's program. It fails with ErrTCPUnavailable
// when the kernel cannot run it. The caller runs Verify before use.
func OpenTCP(k *Kernel) (*TCPReader, error) {
	spec, cache, err := k.load(ErrTCPUnavailable)
	if err != nil {
		return nil, err
	}
	l, err := loadTCPLayout(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTCPUnavailable, err)
	}
	sl, err := loadSockStateLayout(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTCPUnavailable, err)
	}
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"kbuf": {Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 1},
			"sbuf": {Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"tcp": {Name: "ckpt_tcp", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "tcp",
				Instructions: tcpProgram(l), License: "GPL"},
			"states": {Name: "ckpt_sockstate", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "task_file",
				Instructions: sockStateProgram(sl), License: "GPL"},
		},
	}, ebpf.CollectionOptions{Cache: cache})
	if err != nil {
		return nil, fmt.Errorf("%w: BPF TCP socket and socket state iterator programs: %v", ErrTCPUnavailable, err)
	}
	return &TCPReader{buf: coll.Maps["kbuf"], sbuf: coll.Maps["sbuf"], prog: coll.Programs["tcp"], states: coll.Programs["states"]}, nil
}

// Close unloads the programs.
func (r *TCPReader) Close() {
	r.prog.Close()
	r.states.Close()
	r.buf.Close()
	r.sbuf.Close()
}

// Locks reads the sk_userlocks of every TCP socket of the caller's
// network namespace (the thread's, when the iterator is made), by
// cookie (the read gives every socket one, which SO_COOKIE then says).
func (r *TCPReader) Locks() (map[uint64]uint8, error) {
	out, err := runIter(r.prog, nil)
	if err != nil {
		return nil, fmt.Errorf("TCP sockets: %w", err)
	}
	m := map[uint64]uint8{}
	for ; len(out) >= 16; out = out[16:] {
		if c := binary.LittleEndian.Uint64(out); c != 0 {
			m[c] = out[9]
		}
	}
	return m, nil
}

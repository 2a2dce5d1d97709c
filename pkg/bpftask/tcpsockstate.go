package bpftask

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// The socket state reader reads what nothing but the kernel's struct
// socket shows of a socket: its socket layer state (struct socket.state,
// enum socket_state), which says whether a TCP socket whose connect() was
// non-blocking is still "connecting" (connect() called again returns 0
// once, then EISCONN) or connected (EISCONN at once), and whether a
// closed one was shut down while connecting (SS_DISCONNECTING: connect()
// says EINVAL). A task file iterator (iter/task_file) limited to ckpt's
// own process writes, for each of ckpt's fds, its number and
// file->private_data->state: the dump asks about its own copy of a
// socket (pidfd_getfd), in any TCP state, closed ones too (which the TCP
// socket iterator does not see: they are in no hash table). It is
// trusted only once VerifySockState read sockets it made itself.

// Socket layer states (enum socket_state).
const (
	SockUnconnected   = 1 // SS_UNCONNECTED
	SockConnecting    = 2 // SS_CONNECTING
	SockConnected     = 3 // SS_CONNECTED
	SockDisconnecting = 4 // SS_DISCONNECTING
)

// sockStateLayout holds the offsets (bytes) the program reads.
type sockStateLayout struct {
	itfFD, itfFile uint32 // struct bpf_iter__task_file
	privateData    uint32 // struct file
	state          uint32 // struct socket
}

func loadSockStateLayout(s *btf.Spec) (*sockStateLayout, error) {
	st := map[string]*btf.Struct{}
	for _, n := range []string{"bpf_iter__task_file", "file", "socket"} {
		var err error
		if st[n], err = structType(s, n); err != nil {
			return nil, err
		}
	}
	// typedef enum { SS_FREE = 0, ... } socket_state;
	var td *btf.Typedef
	if err := s.TypeByName("socket_state", &td); err != nil {
		return nil, fmt.Errorf("BTF: socket_state: %w", err)
	}
	e, ok := btf.UnderlyingType(td).(*btf.Enum)
	if !ok {
		return nil, fmt.Errorf("BTF: socket_state is %v, not an enum: %w", td.Type, errLayout)
	}
	want := map[string]uint64{"SS_UNCONNECTED": SockUnconnected, "SS_CONNECTING": SockConnecting,
		"SS_CONNECTED": SockConnected, "SS_DISCONNECTING": SockDisconnecting}
	for _, v := range e.Values {
		if w, ok := want[v.Name]; ok {
			if v.Value != w {
				return nil, fmt.Errorf("enum socket_state: %s is %d, want %d: %w", v.Name, v.Value, w, errLayout)
			}
			delete(want, v.Name)
		}
	}
	if len(want) != 0 {
		return nil, fmt.Errorf("enum socket_state: missing %v: %w", want, errLayout)
	}
	l := &sockStateLayout{}
	if err := setOffsets([]offset{
		{&l.itfFD, st["bpf_iter__task_file"], 4, []string{"fd"}},
		{&l.itfFile, st["bpf_iter__task_file"], 8, []string{"file"}},
		{&l.privateData, st["file"], 8, []string{"private_data"}},
		{&l.state, st["socket"], 4, []string{"state"}},
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// sockStateProgram builds the iterator program: 8 bytes a file, its fd
// then file->private_data->state (0 if it cannot be read). It is run for
// ckpt's own process only, and only the state of an fd the caller knows
// to be a socket means anything.
func sockStateProgram(l *sockStateLayout) asm.Instructions {
	in := append(iterStart(int16(l.itfFile), asm.LoadMapPtr(asm.R1, 0).WithReference("sbuf")), // ctx->file
		asm.Mov.Imm(asm.R0, 0),
		asm.StoreMem(asm.R9, 0, asm.R0, asm.DWord),
		asm.LoadMem(asm.R1, asm.R6, int16(l.itfFD), asm.Word),
		asm.StoreMem(asm.R9, 0, asm.R1, asm.Word),
		// file->private_data, then its state.
		asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -16),
		asm.Mov.Imm(asm.R2, 8),
		asm.Mov.Reg(asm.R3, asm.R7), asm.Add.Imm(asm.R3, int32(l.privateData)),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, "write"),
		asm.LoadMem(asm.R3, asm.R10, -16, asm.DWord),
		asm.JEq.Imm(asm.R3, 0, "write"),
		asm.Add.Imm(asm.R3, int32(l.state)),
		asm.Mov.Reg(asm.R1, asm.R9), asm.Add.Imm(asm.R1, 4),
		asm.Mov.Imm(asm.R2, 4),
		asm.FnProbeReadKernel.Call(),
		asm.Mov.Reg(asm.R1, asm.R8).WithSymbol("write"),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, 8),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
	return in
}

// SockState reads the socket layer state (SockConnecting...) of the
// socket fd of ckpt's own process: 0 if fd is not open.
func (r *TCPReader) SockState(fd int) (uint8, error) {
	m, err := r.sockStates()
	if err != nil {
		return 0, err
	}
	return m[fd], nil
}

// sockStates runs the program once: the state of every fd of ckpt's
// process, by number (meaningless for one that is not a socket).
func (r *TCPReader) sockStates() (map[int]uint8, error) {
	var info [16]byte
	binary.LittleEndian.PutUint32(info[0:], uint32(os.Getpid()))
	out, err := runIter(r.states, info[:])
	if err != nil {
		return nil, fmt.Errorf("socket states: %w", err)
	}
	m := map[int]uint8{}
	for ; len(out) >= 8; out = out[8:] {
		m[int(binary.LittleEndian.Uint32(out))] = uint8(binary.LittleEndian.Uint32(out[4:]))
	}
	return m, nil
}

package bpftask

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// The UNIX accept queue reader uses two programs:
//
// The socket table, a UNIX socket iterator (iter/unix), writes for every
// UNIX socket of the network namespace it runs in its address and its
// inode number (0 for one without a file: a connection not accepted yet,
// or a socket being closed), 16 bytes each.
//
// The memory reader, a task iterator limited to ckpt's own main thread
// (so it runs once), copies up to memSlots pieces of kernel memory, of at
// most memSlot bytes each, whose addresses and sizes the map memReq
// holds; before them, the result of each copy (0, or a negative errno:
// such a piece is zeroed).

const (
	memSlots = 14
	memSlot  = 2048
	memHdr   = memSlots * 8
	memOut   = memHdr + memSlots*memSlot // under the iterator's 32 KiB
)

// tableProgram builds the socket table program.
func tableProgram(socketOff, inodeOff uint32) asm.Instructions {
	return append(iterStart(8, asm.LoadMapPtr(asm.R1, 0).WithReference("tbuf")), // ctx->unix_sk
		asm.StoreMem(asm.R9, 0, asm.R7, asm.DWord),
		asm.Mov.Imm(asm.R0, 0), asm.StoreMem(asm.R9, 8, asm.R0, asm.DWord),
		// sk->sk_socket
		asm.Mov.Reg(asm.R1, asm.R9), asm.Add.Imm(asm.R1, 8),
		asm.Mov.Imm(asm.R2, 8),
		asm.Mov.Reg(asm.R3, asm.R7), asm.Add.Imm(asm.R3, int32(socketOff)),
		asm.FnProbeReadKernel.Call(),
		asm.LoadMem(asm.R3, asm.R9, 8, asm.DWord),
		asm.Mov.Imm(asm.R0, 0), asm.StoreMem(asm.R9, 8, asm.R0, asm.DWord),
		asm.JEq.Imm(asm.R3, 0, "write"),
		// SOCK_INODE(sk_socket)->i_ino
		asm.Mov.Reg(asm.R1, asm.R9), asm.Add.Imm(asm.R1, 8),
		asm.Mov.Imm(asm.R2, 8),
		asm.Add.Imm(asm.R3, int32(inodeOff)),
		asm.FnProbeReadKernel.Call(),
		asm.Mov.Reg(asm.R1, asm.R8).WithSymbol("write"),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, 16),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
}

// memProgram builds the memory reader program.
func memProgram() asm.Instructions {
	lookup := func(m string) asm.Instructions {
		return lookupElem(asm.LoadMapPtr(asm.R1, 0).WithReference(m))
	}
	in := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, 8, asm.DWord), // ctx->task
		asm.JEq.Imm(asm.R7, 0, "out"),
		asm.LoadMem(asm.R8, asm.R6, 0, asm.DWord), // ctx->meta
		asm.LoadMem(asm.R8, asm.R8, 0, asm.DWord), // meta->seq
	}
	in = append(in, lookup("mbuf")...)
	in = append(in, asm.Mov.Reg(asm.R9, asm.R0))
	in = append(in, lookup("mreq")...)
	in = append(in, asm.Mov.Reg(asm.R6, asm.R0))
	label := ""
	for i := range memSlots {
		first := asm.LoadMem(asm.R2, asm.R6, int16(i*16+8), asm.DWord) // size
		if label != "" {
			first = first.WithSymbol(label)
		}
		label = fmt.Sprintf("skip%d", i)
		in = append(in,
			first,
			asm.JGT.Imm(asm.R2, memSlot, label),
			asm.LoadMem(asm.R3, asm.R6, int16(i*16), asm.DWord), // address
			asm.Mov.Reg(asm.R1, asm.R9), asm.Add.Imm(asm.R1, int32(memHdr+i*memSlot)),
			asm.FnProbeReadKernel.Call(),
			asm.StoreMem(asm.R9, int16(i*8), asm.R0, asm.DWord),
		)
	}
	return append(in,
		asm.Mov.Reg(asm.R1, asm.R8).WithSymbol(label),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, memOut),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
}

// filesProgram builds the program that lists open files: a task file
// iterator (iter/task_file) writing for every fd of every task its
// process (tgid), its number and its struct file's address, 16 bytes
// each.
func filesProgram(l *unixLayout) asm.Instructions {
	return append(iterStart(int16(l.itfTask), asm.LoadMapPtr(asm.R1, 0).WithReference("fbuf")), // ctx->task
		asm.LoadMem(asm.R1, asm.R6, int16(l.itfFD), asm.Word),
		asm.StoreMem(asm.R9, 4, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R6, int16(l.itfFile), asm.DWord),
		asm.StoreMem(asm.R9, 8, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R9),
		asm.Mov.Imm(asm.R2, 4),
		asm.Mov.Reg(asm.R3, asm.R7), asm.Add.Imm(asm.R3, int32(l.tgid)),
		asm.FnProbeReadKernel.Call(),
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, 16),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
}

// unixProgs are the loaded programs and their maps.
type unixProgs struct {
	tbuf, mbuf, mreq, fbuf *ebpf.Map
	table, mem, files      *ebpf.Program
}

func (p *unixProgs) Close() {
	for _, pr := range []*ebpf.Program{p.table, p.mem, p.files} {
		if pr != nil {
			pr.Close()
		}
	}
	for _, m := range []*ebpf.Map{p.tbuf, p.mbuf, p.mreq, p.fbuf} {
		if m != nil {
			m.Close()
		}
	}
}

// loadUnixProgs makes the maps and loads the programs (one collection:
// the kernel's BTF, which each program's attach target is found in, is
// read once, from cache).
func loadUnixProgs(l *unixLayout, cache *btf.Cache) (*unixProgs, error) {
	arr := func(size uint32) *ebpf.MapSpec {
		return &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: size, MaxEntries: 1}
	}
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{"tbuf": arr(16), "mbuf": arr(memOut), "mreq": arr(memSlots * 16), "fbuf": arr(16)},
		Programs: map[string]*ebpf.ProgramSpec{
			"table": {Name: "ckpt_unix", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "unix",
				Instructions: tableProgram(l.socket, l.inode), License: "GPL"},
			"mem": {Name: "ckpt_kmem", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "task",
				Instructions: memProgram(), License: "GPL"},
			"files": {Name: "ckpt_files", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "task_file",
				Instructions: filesProgram(l), License: "GPL"},
		},
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Cache: cache})
	if err != nil {
		return nil, fmt.Errorf("BPF UNIX socket iterator and memory reader programs: %w", err)
	}
	return &unixProgs{tbuf: coll.Maps["tbuf"], mbuf: coll.Maps["mbuf"], mreq: coll.Maps["mreq"], fbuf: coll.Maps["fbuf"],
		table: coll.Programs["table"], mem: coll.Programs["mem"], files: coll.Programs["files"]}, nil
}

// runIter attaches prog as an iterator (info: its union
// bpf_iter_link_info, nil for none) and reads all it writes.
func runIter(prog *ebpf.Program, info []byte) ([]byte, error) {
	var attr [64]byte
	binary.LittleEndian.PutUint32(attr[0:], uint32(prog.FD()))
	binary.LittleEndian.PutUint32(attr[8:], bpfTraceIter)
	if info != nil {
		binary.LittleEndian.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&info[0]))))
		binary.LittleEndian.PutUint32(attr[24:], uint32(len(info)))
	}
	lfd, _, e := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if e != 0 {
		return nil, fmt.Errorf("BPF iterator link: %w", e)
	}
	defer unix.Close(int(lfd))
	var iattr [8]byte
	binary.LittleEndian.PutUint32(iattr[0:], uint32(lfd))
	ifd, _, e := unix.Syscall(unix.SYS_BPF, bpfIterCreate, uintptr(unsafe.Pointer(&iattr[0])), uintptr(len(iattr)))
	if e != 0 {
		return nil, fmt.Errorf("BPF iterator: %w", e)
	}
	f := os.NewFile(ifd, "bpf-iter")
	defer f.Close()
	var out []byte
	chunk := make([]byte, 64<<10)
	for {
		n, err := f.Read(chunk)
		out = append(out, chunk[:n]...)
		if err == io.EOF || n == 0 {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("BPF iterator: read: %w", err)
		}
	}
}

package bpftask

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// A region is a piece of kernel memory the iterator program copies into
// its output: len bytes at off from the task (via == noDeref) or from the
// pointer found at offset via of the task.
type region struct {
	via, off, len uint32
	out           uint32 // where in the output
}

const (
	noDeref    = ^uint32(0)
	ptRegsSize = 21 * 8 // struct pt_regs on x86-64
)

// iterStart is how every iterator program of the package starts: R6 the
// context, R7 the object at objOff in it (the program jumps to "out",
// writing nothing, when there is none), R8 the iterator's seq_file, and
// R9 the one element of the scratch map that loadMap puts into R1.
func iterStart(objOff int16, loadMap asm.Instruction) asm.Instructions {
	in := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, objOff, asm.DWord),
		asm.JEq.Imm(asm.R7, 0, "out"),
		asm.LoadMem(asm.R8, asm.R6, 0, asm.DWord), // ctx->meta
		asm.LoadMem(asm.R8, asm.R8, 0, asm.DWord), // meta->seq
	}
	in = append(in, lookupElem(loadMap)...)
	return append(in, asm.Mov.Reg(asm.R9, asm.R0))
}

// lookupElem looks up element 0 of the array map that loadMap puts into
// R1: its address in R0, or a jump to "out" when there is none.
func lookupElem(loadMap asm.Instruction) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		loadMap,
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
	}
}

// program builds the task iterator program: for the one task its link
// names, it copies the task's user registers (bpf_task_pt_regs) and the
// regions into the one element of buf, and writes them to the iterator's
// seq_file. Every size is a constant the verifier checks.
func program(buf *ebpf.Map, regions []region, total uint32) asm.Instructions {
	in := append(iterStart(8, asm.LoadMapPtr(asm.R1, buf.FD())), // ctx->task
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.FnTaskPtRegs.Call(),
		asm.Mov.Reg(asm.R3, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R9),
		asm.Mov.Imm(asm.R2, ptRegsSize),
		asm.FnProbeReadKernel.Call(),
	)
	for _, r := range regions {
		if r.via == noDeref {
			in = append(in, asm.Mov.Reg(asm.R3, asm.R7), asm.Add.Imm(asm.R3, int32(r.off)))
		} else {
			in = append(in,
				asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -16),
				asm.Mov.Imm(asm.R2, 8),
				asm.Mov.Reg(asm.R3, asm.R7), asm.Add.Imm(asm.R3, int32(r.via)),
				asm.FnProbeReadKernel.Call(),
				asm.LoadMem(asm.R3, asm.R10, -16, asm.DWord),
				asm.Add.Imm(asm.R3, int32(r.off)),
			)
		}
		in = append(in,
			asm.Mov.Reg(asm.R1, asm.R9), asm.Add.Imm(asm.R1, int32(r.out)),
			asm.Mov.Imm(asm.R2, int32(r.len)),
			asm.FnProbeReadKernel.Call(),
		)
	}
	in = append(in,
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, int32(total)),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
	return in
}

// load makes the output map and loads the program (its attach target
// found in cache's kernel BTF).
func load(regions []region, total uint32, cache *btf.Cache) (*ebpf.Map, *ebpf.Program, error) {
	buf, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: total, MaxEntries: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("BPF map: %w", err)
	}
	// A collection of one: its loader takes the shared cache.
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"task": {Name: "ckpt_task", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "task",
			Instructions: program(buf, regions, total), License: "GPL"},
	}}, ebpf.CollectionOptions{Cache: cache})
	if err != nil {
		buf.Close()
		return nil, nil, fmt.Errorf("BPF task iterator program: %w", err)
	}
	return buf, coll.Programs["task"], nil
}

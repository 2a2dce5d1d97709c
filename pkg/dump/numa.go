package dump

// NUMA memory policies: each thread's (set_mempolicy) and each mapping's
// own (mbind), asked with injected get_mempolicy calls. The restore side
// is pkg/restore/numa.go.

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// mpolFAddr is get_mempolicy's MPOL_F_ADDR: the policy of the mapping
// at an address (its own, or the default), not the thread's.
const mpolFAddr = 2

// nodemaskBytes is the size of a nodemask of image.MemPolicyMaxNode nodes.
const nodemaskBytes = image.MemPolicyMaxNode / 8

// memPolicy asks the mode (with its flags) of a thread's NUMA memory
// policy (set_mempolicy); th.MemPolicy stays nil for the default.
// memPolicyNodes asks its nodemask afterwards.
func memPolicy(a asker, th *image.Thread) {
	a.ask("get_mempolicy", 4, func(_ uint64, b []byte) error {
		if mode := binary.LittleEndian.Uint32(b); mode != image.MpolDefault {
			th.MemPolicy = &image.MemPolicy{Mode: mode}
		}
		return nil
	}, unix.SYS_GET_MEMPOLICY, outArg, 0, 0, 0, 0)
}

// memPolicyNodes asks the nodemask of a thread's policy found by
// memPolicy, if it has one: a second round of calls, made only then.
func memPolicyNodes(a asker, th *image.Thread) error {
	if pol := th.MemPolicy; pol != nil && pol.Mode&^image.MpolModeFlags != image.MpolLocal {
		askNodes(a, fmt.Sprintf("get_mempolicy nodemask of thread %d", th.TID), pol, 0, 0)
	}
	return a.flush()
}

// askNodes asks the nodemask of a policy: the thread's (addr, flags 0)
// or a mapping's (MPOL_F_ADDR). Trailing empty words are left out.
func askNodes(a asker, name string, pol *image.MemPolicy, addr, flags uint64) {
	a.ask(name, nodemaskBytes, func(_ uint64, b []byte) error {
		var nodes []uint64
		for i := 0; i+8 <= len(b); i += 8 {
			nodes = append(nodes, le64(b[i:]))
		}
		for len(nodes) > 0 && nodes[len(nodes)-1] == 0 {
			nodes = nodes[:len(nodes)-1]
		}
		pol.Nodes = nodes
		return nil
	}, unix.SYS_GET_MEMPOLICY, 0, outArg, image.MemPolicyMaxNode, addr, flags)
}

// askVMAPolicies asks, for each mapping vmaPolicies marked (a non-default
// policy in numa_maps), its own policy with MPOL_F_ADDR: numa_maps shows
// the leader's policy for a mapping without one of its own, so it alone
// cannot tell them apart. A mapping whose policy is the default is
// unmarked.
func askVMAPolicies(a asker, p *image.Process) {
	for i := range p.VMAs {
		v := &p.VMAs[i]
		pol := v.MemPolicy
		if pol == nil {
			continue
		}
		what := fmt.Sprintf("get_mempolicy(MPOL_F_ADDR) of mapping %#x-%#x", v.Start, v.End)
		askNodes(a, what+" nodemask", pol, v.Start, mpolFAddr)
		a.ask(what, 4, func(_ uint64, b []byte) error {
			pol.Mode = binary.LittleEndian.Uint32(b)
			if pol.Mode == image.MpolDefault {
				v.MemPolicy = nil
			}
			return nil
		}, unix.SYS_GET_MEMPOLICY, outArg, 0, 0, v.Start, mpolFAddr)
	}
}

// vmaPolicies returns the start addresses of the mappings whose NUMA
// memory policy in /proc/PID/numa_maps is not the default: their own
// (mbind), or else the leader's (set_mempolicy). Only these are asked
// (askVMAPolicies).
func vmaPolicies(pid sys.PID) (map[uint64]bool, error) {
	maps, err := proc.ReadNUMAPolicies(pid)
	if os.IsNotExist(err) {
		return nil, nil // a kernel without NUMA
	}
	if err != nil {
		return nil, fmt.Errorf("numa_maps: %w", err)
	}
	var out map[uint64]bool
	for _, m := range maps {
		if m.Policy != "default" {
			if out == nil {
				out = map[uint64]bool{}
			}
			out[m.Start] = true
		}
	}
	return out, nil
}

// vmaPolicyMarked returns the first mapping vmaPolicies marked, or nil.
func vmaPolicyMarked(p *image.Process) *image.VMA {
	for i := range p.VMAs {
		if p.VMAs[i].MemPolicy != nil {
			return &p.VMAs[i]
		}
	}
	return nil
}

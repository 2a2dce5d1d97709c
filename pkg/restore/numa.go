package restore

// NUMA memory policies: each mapping's own (mbind), given once the
// memory is in place, and each thread's (set_mempolicy), in its batch of
// threadsMisc. The dump side is pkg/dump/numa.go.

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// nodemask is pol's nodemask as the kernel reads it: MemPolicyMaxNode
// bits, 64 a word.
func nodemask(pol *image.MemPolicy) []byte {
	out := make([]byte, image.MemPolicyMaxNode/8)
	for i, w := range pol.Nodes {
		binary.LittleEndian.PutUint64(out[8*i:], w)
	}
	return out
}

// maxNode is the maxnode argument of mbind and set_mempolicy for a
// nodemask(): the kernel reads one bit less than it says.
const maxNode = image.MemPolicyMaxNode + 1

// policyName names a policy in errors: its mode with flags and nodes.
func policyName(pol *image.MemPolicy) string {
	return fmt.Sprintf("NUMA policy mode %#x nodes %#x", pol.Mode, pol.Nodes)
}

// vmaPolicy gives v its own NUMA memory policy (mbind), if it had one. A
// node this machine does not have fails the restore, naming the policy.
func (b *builder) vmaPolicy(v *image.VMA) error {
	pol := v.MemPolicy
	if pol == nil {
		return nil
	}
	if err := b.write(scratchOff, nodemask(pol)); err != nil {
		return err
	}
	_, err := b.call(fmt.Sprintf("mbind %#x-%#x %s", v.Start, v.End, policyName(pol)), unix.SYS_MBIND,
		v.Start, v.Len(), uint64(pol.Mode), b.gadget+scratchOff, maxNode, 0)
	return err
}

// threadPolicy adds to tb the set_mempolicy of thread th, if it had a
// policy other than the default.
func threadPolicy(tb *threadBatch, th *image.Thread) error {
	pol := th.MemPolicy
	if pol == nil {
		return nil
	}
	addr, err := tb.put(nodemask(pol))
	if err != nil {
		return err
	}
	tb.add(fmt.Sprintf("set_mempolicy %s", policyName(pol)), unix.SYS_SET_MEMPOLICY, uint64(pol.Mode), addr, maxNode)
	return nil
}

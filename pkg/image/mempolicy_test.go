package image

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckMemPolicy checks that the NUMA memory policies of threads and
// mappings are validated: a known mode, known flags, not both static and
// relative nodes, a nodemask of at most MemPolicyMaxNode nodes.
func TestCheckMemPolicy(t *testing.T) {
	for _, c := range []struct {
		name string
		pol  MemPolicy
		want string // "" for valid
	}{
		{"bind", MemPolicy{Mode: MpolBind, Nodes: []uint64{1}}, ""},
		{"interleave static", MemPolicy{Mode: MpolInterleave | MpolFStaticNodes, Nodes: []uint64{1}}, ""},
		{"preferred relative", MemPolicy{Mode: MpolPreferred | MpolFRelativeNodes, Nodes: []uint64{1}}, ""},
		{"preferred many", MemPolicy{Mode: MpolPreferredMany, Nodes: []uint64{1}}, ""},
		{"weighted interleave", MemPolicy{Mode: MpolWeightedInterleave, Nodes: []uint64{1}}, ""},
		{"bind balancing", MemPolicy{Mode: MpolBind | MpolFNumaBalancing, Nodes: []uint64{1}}, ""},
		{"local", MemPolicy{Mode: MpolLocal}, ""},
		{"default", MemPolicy{Mode: MpolDefault}, ""},
		{"mode unknown", MemPolicy{Mode: MpolMax, Nodes: []uint64{1}}, "NUMA policy mode 7 unknown"},
		{"flag unknown", MemPolicy{Mode: MpolBind | 1<<12, Nodes: []uint64{1}}, "unknown"},
		{"static and relative", MemPolicy{Mode: MpolBind | MpolFStaticNodes | MpolFRelativeNodes, Nodes: []uint64{1}}, "both static and relative"},
		{"nodemask too long", MemPolicy{Mode: MpolBind, Nodes: make([]uint64, 17)}, "nodemask of 17 words"},
	} {
		for _, where := range []string{"thread", "vma"} {
			t.Run(c.name+"/"+where, func(t *testing.T) {
				p := sampleRoot()
				pol := c.pol
				if where == "thread" {
					p.Threads[0].MemPolicy = &pol
				} else {
					p.VMAs[0].MemPolicy = &pol
				}
				err := checkProcess(p)
				switch {
				case c.want == "" && err != nil:
					t.Fatalf("checkProcess: %v, want valid", err)
				case c.want != "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want)):
					t.Fatalf("checkProcess: %v, want ErrInvalid saying %q", err, c.want)
				}
			})
		}
	}
}

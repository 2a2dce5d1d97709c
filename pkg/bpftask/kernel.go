package bpftask

import (
	"fmt"
	"os"

	"github.com/cilium/ebpf/btf"
)

// Kernel is the running kernel's BTF, decoded once and shared by the
// readers opened with it: each reader finds its offsets there, and its
// programs' attach targets. Decoding it is most of what opening a reader
// costs (20-80 ms for this kernel's), so one dump opens all its readers
// with one Kernel. Safe for concurrent use.
type Kernel struct {
	cache *btf.Cache
}

// NewKernel returns a Kernel that decodes the BTF on first use.
func NewKernel() *Kernel { return &Kernel{cache: btf.NewCache()} }

// load returns the kernel's BTF and the cache the programs' loads share,
// or an error wrapping unavailable (the reader's sentinel). A nil k
// decodes the BTF anew.
func (k *Kernel) load(unavailable error) (*btf.Spec, *btf.Cache, error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, nil, fmt.Errorf("%w: no kernel BTF (/sys/kernel/btf/vmlinux): %v", unavailable, err)
	}
	if k == nil {
		k = NewKernel()
	}
	s, err := k.cache.Kernel()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: kernel BTF: %v", unavailable, err)
	}
	return s, k.cache, nil
}

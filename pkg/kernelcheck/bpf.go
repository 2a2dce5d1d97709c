package kernelcheck

import "github.com/ckpt/ckpt/pkg/bpftask"

// Names of the BPF readers' probes.
const (
	FeatureBPFTask = "BPF task reader"
	FeatureBPFTCP  = "BPF TCP reader"
	FeatureBPFUnix = "BPF UNIX reader"
	FeatureBPFSock = "BPF socket reader"
)

// bpfFeatures are the BPF readers (pkg/bpftask), each loaded and, where
// it can check itself alone, checked on objects it makes: what a dump
// reads with them is refused by name on a kernel where they fail. They
// share one decoding of the kernel's BTF (k).
func bpfFeatures(k *bpftask.Kernel) []Feature {
	return []Feature{
		{FeatureBPFTask, "a parent waiting in vfork() and a process whose leader exited dumped (else refused)", 0, func() error {
			r, err := bpftask.Open(k)
			if err == nil {
				r.Close()
			}
			return err
		}},
		{FeatureBPFTCP, "the port and socket-layer state of TCP connections read (else a connection the program made is refused)", 0, func() error {
			r, err := bpftask.OpenTCP(k)
			if err != nil {
				return err
			}
			defer r.Close()
			if err := r.Verify(); err != nil {
				return err
			}
			return r.VerifySockState()
		}},
		{FeatureBPFUnix, "UNIX connections waiting in an accept queue, and where a stream's piece with files starts, read (else refused)", 0, func() error {
			r, err := bpftask.OpenUnix(k)
			if err != nil {
				return err
			}
			defer r.Close()
			if err := r.Verify(); err != nil {
				return err
			}
			return r.VerifyPieces()
		}},
		{FeatureBPFSock, "multicast memberships read, reuseport programs, IPsec policies and saved SYNs found (else refused)", 0, func() error {
			r, err := bpftask.OpenSock(k)
			if err != nil {
				return err
			}
			defer r.Close()
			return r.Verify()
		}},
	}
}

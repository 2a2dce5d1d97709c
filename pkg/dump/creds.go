package dump

import (
	"fmt"
	"reflect"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
)

// Credentials of a frozen process, per thread: ids, groups, capabilities,
// no_new_privs and seccomp filters with their flags (securebits are asked
// in the injection window, injectThreadAttrs): what restore/creds.go sets
// again.

// readCreds reads the credentials of task tid of process pid from its
// status, and its seccomp filters with their flags. (Strict seccomp mode is
// seen when the tree is frozen: Thread.SeccompStrict.)
func readCreds(tid sys.TID, status *proc.Status) (*image.Creds, error) {
	c := &image.Creds{
		UID: status.UID, GID: status.GID, Groups: status.Groups,
		CapInh: status.CapInh, CapPrm: status.CapPrm, CapEff: status.CapEff, CapBnd: status.CapBnd, CapAmb: status.CapAmb,
		NoNewPrivs: status.NoNewPrivs, Seccomp: status.Seccomp,
	}
	if c.Seccomp == 2 {
		var err error
		if c.Filters, err = ptrace.GetSeccompFilters(tid); err != nil {
			return nil, err
		}
		for i := range c.Filters {
			fl, err := seccompFlags(tid, i)
			if err != nil {
				return nil, err
			}
			c.FilterFlags = append(c.FilterFlags, fl)
		}
	}
	return c, nil
}

// seccompFlags returns the SECCOMP_FILTER_FLAG_* filter i of tid was
// installed with.
func seccompFlags(tid sys.TID, i int) (uint64, error) {
	fl, err := ptrace.GetSeccompFilterFlags(tid, i)
	if err != nil {
		return 0, err
	}
	if fl&^seccompFilterFlagsSaved != 0 {
		return 0, refuse(tgidOf(tid), fmt.Sprintf("thread %d seccomp filter %d", tid, i), "filter flags %#x are not restored", fl)
	}
	return fl, nil
}

// threadCreds moves each thread's credentials into Process.Creds (the
// leader's) and keeps them in the thread only where they differ.
func threadCreds(p *image.Process) {
	if len(p.Threads) == 0 || p.Threads[0].Creds == nil {
		return
	}
	p.Creds = *p.Threads[0].Creds
	for i := range p.Threads {
		if c := p.Threads[i].Creds; c != nil && reflect.DeepEqual(*c, p.Creds) {
			p.Threads[i].Creds = nil
		}
	}
}

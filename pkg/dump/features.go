package dump

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/kernelcheck"
)

// checkFeatures probes the kernel features this tree needs beyond what
// every dump needs (kernelcheck.Dump): TCP_REPAIR for an established TCP
// connection. A missing one is named with the first process and fd that
// needs it, before any state is read (and before a group's barrier).
func (t *tree) checkFeatures() error {
	for key, our := range t.socks.fds {
		if _, conn := t.socks.reuse[our.Int()]; !conn {
			continue // not an established TCP connection
		}
		if err := kernelcheck.TCPRepair(); err != nil {
			return fmt.Errorf("process %d fd %d: TCP connection: %w", key.pid, key.fd, err)
		}
		return nil
	}
	return nil
}

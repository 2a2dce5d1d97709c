package dump

import (
	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/bpftask"
)

// Waiting implements fdkind.SocketDumpEnv: the connections waiting in the
// accept queue of the UNIX listener lino, read once, in the tree's
// network namespace. The reader is checked first (Verify): a kernel it
// cannot read, or reads wrong, fails with the reason.
func (t *tree) Waiting(lino uint32) ([]bpftask.UnixConn, error) {
	w := t.unixReader()
	r, err := w.use(&w.accepts, (*bpftask.UnixReader).Verify)
	if err != nil {
		return nil, err
	}
	if c, ok := w.conns[lino]; ok {
		return c, nil
	}
	var conns []bpftask.UnixConn
	err = t.socks.inNetns(func() (err error) {
		conns, err = r.AcceptQueue(lino)
		return err
	})
	if err != nil {
		return nil, err
	}
	w.conns[lino] = conns
	return conns, nil
}

// inNetns runs fn on a thread in the tree's network namespace (at once if
// it is ckpt's own; see sys.InNetns).
func (s *sockState) inNetns(fn func() error) error { return sys.InNetns(s.netnsFD(), fn) }

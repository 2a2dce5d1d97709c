package dump

import (
	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/bpftask"
)

// waitingState is what the dump read of the connections waiting in UNIX
// listeners' accept queues (bpftask.UnixReader): the reader, opened and
// checked on first need, and each listener's connections.
type waitingState struct {
	reader  *bpftask.UnixReader
	openErr error
	conns   map[uint32][]bpftask.UnixConn
}

// Waiting implements fdkind.SocketDumpEnv: the connections waiting in the
// accept queue of the UNIX listener lino, read once, in the tree's
// network namespace. The reader is checked first (Verify): a kernel it
// cannot read, or reads wrong, fails with the reason.
func (t *tree) Waiting(lino uint32) ([]bpftask.UnixConn, error) {
	w := t.socks.waiting
	if w == nil {
		w = &waitingState{conns: map[uint32][]bpftask.UnixConn{}}
		t.socks.waiting = w
		w.reader, w.openErr = bpftask.OpenUnix()
		if w.openErr == nil {
			if w.openErr = w.reader.Verify(); w.openErr != nil {
				w.reader.Close()
				w.reader = nil
			}
		}
	}
	if w.openErr != nil {
		return nil, w.openErr
	}
	if c, ok := w.conns[lino]; ok {
		return c, nil
	}
	var conns []bpftask.UnixConn
	err := t.socks.inNetns(func() (err error) {
		conns, err = w.reader.AcceptQueue(lino)
		return err
	})
	if err != nil {
		return nil, err
	}
	w.conns[lino] = conns
	return conns, nil
}

// closeWaiting unloads the reader.
func (t *tree) closeWaiting() {
	if w := t.socks.waiting; w != nil && w.reader != nil {
		w.reader.Close()
		w.reader = nil
	}
}

// inNetns runs fn on a thread in the tree's network namespace (at once if
// it is ckpt's own; see sys.InNetns).
func (s *sockState) inNetns(fn func() error) error { return sys.InNetns(s.netnsFD(), fn) }

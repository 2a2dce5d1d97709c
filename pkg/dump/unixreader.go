package dump

import "github.com/ckpt/ckpt/pkg/bpftask"

// unixReaderState is the BPF UNIX reader (bpftask.UnixReader), loaded on
// first need only: for connections waiting in a listener's accept queue
// (Waiting), or for a stream queue whose peek gave more than one byte
// with files in flight (UnixPieces). Loading it costs about 30 ms while
// the tree is frozen. Each use's own check runs once before it.
type unixReaderState struct {
	reader  *bpftask.UnixReader
	openErr error
	// accepts is Verify's outcome (AcceptQueue), pieces VerifyPieces'
	// (Pieces).
	accepts, pieces readerCheck
	// conns are the connections read, by listener.
	conns map[uint32][]bpftask.UnixConn
	// kernel is the dump's BTF, the reader is opened with.
	kernel *bpftask.Kernel
}

// readerCheck is whether a check of the reader ran, and what it said.
type readerCheck struct {
	ran bool
	err error
}

// unixReader is the dump's reader state, made on first need (the reader
// itself is loaded by use).
func (t *tree) unixReader() *unixReaderState {
	if t.socks.unixRd == nil {
		t.socks.unixRd = &unixReaderState{conns: map[uint32][]bpftask.UnixConn{}, kernel: t.kernel}
	}
	return t.socks.unixRd
}

// use loads the reader if it is not yet, and runs check (Verify or
// VerifyPieces) once: a kernel the reader cannot run, or reads wrong,
// fails with the reason every time.
func (w *unixReaderState) use(c *readerCheck, check func(*bpftask.UnixReader) error) (*bpftask.UnixReader, error) {
	if w.reader == nil && w.openErr == nil {
		w.reader, w.openErr = bpftask.OpenUnix(w.kernel)
	}
	if w.openErr != nil {
		return nil, w.openErr
	}
	if !c.ran {
		c.ran, c.err = true, check(w.reader)
	}
	return w.reader, c.err
}

// UnixPieces implements fdkind.SocketDumpEnv: the pieces queued in the
// UNIX stream socket ino, read in the tree's network namespace (the
// reader is checked first, VerifyPieces).
func (t *tree) UnixPieces(ino uint32) ([]bpftask.UnixPiece, error) {
	w := t.unixReader()
	r, err := w.use(&w.pieces, (*bpftask.UnixReader).VerifyPieces)
	if err != nil {
		return nil, err
	}
	var ps []bpftask.UnixPiece
	err = t.socks.inNetns(func() (err error) {
		ps, err = r.Pieces(ino)
		return err
	})
	return ps, err
}

// closeUnixReader unloads the reader.
func (t *tree) closeUnixReader() {
	if w := t.socks.unixRd; w != nil && w.reader != nil {
		w.reader.Close()
		w.reader = nil
	}
}

package bpftask

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// The pieces of a UNIX stream: a stream's receive queue holds one
// sk_buff per send (or per part of a large one), and the files in flight
// of a send (SCM_RIGHTS) are attached to its first. A read takes the
// files with the first byte it takes of that piece, and stops after the
// piece; a peek (MSG_PEEK) reads up to the end of the piece with files
// too, but cannot tell where it starts: even a one-byte peek of a piece
// without files returns the files of the next one (the kernel goes on
// with empty chunks up to a piece with files or other credentials).
// Pieces reads where the pieces start from the kernel's queue.

// UnixPiece is one piece (sk_buff) queued in a UNIX stream socket.
type UnixPiece struct {
	// Len is how many of its bytes are left to read (unix_skb_len: its
	// length less what reads consumed).
	Len int
	// Files is how many files in flight are attached to it (given with
	// the first byte a read takes of it).
	Files int
	// PID, UID and GID are the credentials it carries (PID 0: none).
	PID      int
	UID, GID uint32
}

// Pieces reads the pieces queued in the receive queue of the UNIX stream
// socket whose inode is ino, in the order reads take them. The socket
// must be in the caller's network namespace and the processes that can
// change its queue stopped. The caller runs VerifyPieces first.
func (r *UnixReader) Pieces(ino uint32) ([]UnixPiece, error) {
	sk, s, err := r.socket(ino)
	if err != nil {
		return nil, fmt.Errorf("UNIX socket %d: %w", ino, err)
	}
	l := r.l
	if typ := binary.LittleEndian.Uint16(s[l.typ:]); typ != unix.SOCK_STREAM {
		return nil, fmt.Errorf("UNIX socket %d is of type %d, not a stream: %w", ino, typ, ErrUnixChanged)
	}
	if l.hasOOB && u64(s, l.oob) != 0 {
		return nil, fmt.Errorf("UNIX socket %d: out-of-band data (MSG_OOB) queued: %w", ino, ErrUnixUnreadable)
	}
	qlen, err := queueLen(l, s)
	if err != nil {
		return nil, fmt.Errorf("UNIX socket %d: %w", ino, err)
	}
	out := make([]UnixPiece, qlen)
	b := &batch{r: r}
	r.walkQueue(b, sk, s, qlen, func(n int, h []byte) {
		fail := func(err error) { b.fail(fmt.Errorf("UNIX socket %d: piece %d of its queue: %w", ino, n+1, err)) }
		cb := h[l.skbCB:]
		size, used := u32(h, l.skbLen), u32(cb, l.cbConsumed)
		if used >= size || size > 64<<20 {
			fail(fmt.Errorf("%d bytes, %d of them read: %w", size, used, ErrUnixChanged))
			return
		}
		p := &out[n]
		p.Len, p.UID, p.GID = int(size-used), u32(cb, l.cbUID), u32(cb, l.cbGID)
		if fp := u64(cb, l.cbFP); fp != 0 {
			r.inFlight(b, fp, false, func(n int, _ []uint64) { p.Files = n }, fail)
		}
		if pid := u64(cb, l.cbPID); pid != 0 {
			r.pidNr(b, pid, func(nr int) { p.PID = nr })
		}
	}, func(err error) { b.fail(fmt.Errorf("UNIX socket %d: %w", ino, err)) })
	if err := b.run(); err != nil {
		return nil, err
	}
	return out, nil
}

package sockets

import (
	"errors"
	"fmt"

	"github.com/ckpt/ckpt/pkg/bpftask"
)

// A stream's receive queue holds one piece (sk_buff) per send, the files
// in flight of a send attached to its first. A read gets the files with
// the first byte it takes of their piece; a peek reads up to the end of
// that piece too, but from where it started: bytes sent before the piece
// with the same credentials come back in one peek with it, and no peek
// tells where it starts (a one-byte peek of a piece without files already
// returns the files of the next). Only the kernel's queue does
// (bpftask.UnixReader.Pieces, given as Pieces): cutPieces cuts such bytes
// off, so that the restore sends them apart and a reader reading fewer
// bytes than they are gets the files with a later read, as it would have.

// Pieces reads the pieces queued in the UNIX stream socket whose inode is
// ino, in the order reads take them (bpftask.UnixReader.Pieces, in the
// socket's network namespace).
type Pieces func(ino uint32) ([]bpftask.UnixPiece, error)

// ErrPieceStart means that a peek of a UNIX stream returned more than
// one byte with files in flight, and where the piece they were sent with
// starts cannot be told: no Pieces, or it failed.
var ErrPieceStart = fmt.Errorf("%w: where the piece of a UNIX stream that files in flight were sent with starts is unknown", ErrState)

// errNoPieces is why a peek is refused without Pieces.
var errNoPieces = errors.New("no reader of the kernel's queue")

// cutPieces cuts the messages a peek read from the stream socket ino (in
// order from the head of its queue, appendStream's) where the pieces with
// files start: the bytes before such a piece in the same message become a
// message of their own (glued to the one before when a reader could not
// tell them apart). A message with files of one byte is the piece itself:
// pieces is read only if some message with files has more.
func cutPieces(ino uint32, msgs []UnixMsg, pieces Pieces) ([]UnixMsg, error) {
	var glued *UnixMsg
	for i, m := range msgs {
		if len(m.Rights) > 0 && len(m.Data) > 1 {
			glued = &msgs[i]
			break
		}
	}
	if glued == nil {
		return msgs, nil
	}
	err := errNoPieces
	var ps []bpftask.UnixPiece
	if pieces != nil {
		ps, err = pieces(ino)
	}
	if err != nil {
		return nil, fmt.Errorf("UNIX stream socket %d: %d bytes come with %d files in flight in one peek, and which of them were sent with the files only the kernel's queue tells (%w): %w",
			ino, len(glued.Data), len(glued.Rights), err, ErrPieceStart)
	}
	mismatch := func(at int, what string) error {
		return fmt.Errorf("UNIX stream socket %d: at byte %d of its queue, %s (pieces %v): %w", ino, at, what, ps, ErrPieceStart)
	}
	var out []UnixMsg
	pos, next, end := 0, 0, 0 // next: the first piece not yet passed, end: where it starts
	for _, m := range msgs {
		stop := pos + len(m.Data)
		if len(m.Rights) > 0 {
			// The peek ended with the piece that has the files.
			for next < len(ps) && end < stop {
				if ps[next].Files > 0 && end+ps[next].Len < stop {
					return nil, mismatch(end, fmt.Sprintf("a piece with %d files in flight that the peek did not end with", ps[next].Files))
				}
				end += ps[next].Len
				next++
			}
			if next == 0 || end != stop || ps[next-1].Files != len(m.Rights) {
				return nil, mismatch(pos, fmt.Sprintf("a peek read %d bytes with %d files in flight that end no piece with as many", len(m.Data), len(m.Rights)))
			}
			if cut := stop - ps[next-1].Len - pos; cut > 0 {
				out = appendStream(out, UnixMsg{Data: m.Data[:cut:cut], Cred: m.Cred})
				m.Data = m.Data[cut:]
			}
		}
		out = appendStream(out, m)
		pos = stop
	}
	return out, nil
}

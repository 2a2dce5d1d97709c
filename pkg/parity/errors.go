package parity

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package that falls into one
// of these classes wraps the corresponding sentinel, so callers can branch
// with errors.Is.
var (
	// ErrCorrupt reports data that fails a checksum or a structural check:
	// a parity share header, a parity block, an image block, or a rebuilt
	// image whose digest does not match the one recorded at encode time.
	// Block-level failures are returned as a *CorruptError.
	ErrCorrupt = errors.New("parity: corrupt data")

	// ErrMismatch reports parity that does not belong to the images at hand:
	// shares from different encodes, images whose sizes differ from the ones
	// recorded, or nodes disagreeing about the ring layout.
	ErrMismatch = errors.New("parity: parity does not match the images")

	// ErrNoParity reports a survivor without a parity share.
	ErrNoParity = errors.New("parity: parity share missing")

	// ErrTooManyLost reports that more than one node is missing: single XOR
	// parity can rebuild at most one node.
	ErrTooManyLost = errors.New("parity: more than one node lost")

	// ErrNothingLost reports a recovery request where every node of the ring
	// is among the survivors.
	ErrNothingLost = errors.New("parity: no node is missing")

	// ErrExists reports that recovery would overwrite an existing file in the
	// lost node's directory and Options.Overwrite is not set.
	ErrExists = errors.New("parity: file already exists")

	// ErrAborted is the error a node sees on a link that a peer tore down
	// because the peer failed. It marks secondary failures: the drivers in
	// this package report the peer's original error instead.
	ErrAborted = errors.New("parity: ring aborted by a peer")

	// ErrInvalid reports bad arguments: too few nodes, a block size out of
	// range, a node index outside the ring, a missing link.
	ErrInvalid = errors.New("parity: invalid argument")
)

// BlockKind says which file a corrupt block belongs to.
type BlockKind string

// The kinds of block a CorruptError can name.
const (
	// KindData is a block of a node's checkpoint image.
	KindData BlockKind = "image"
	// KindParity is a block of a node's parity share.
	KindParity BlockKind = "parity"
)

// CorruptError names one corrupt block. It wraps ErrCorrupt.
type CorruptError struct {
	Node   int       // ring index of the node holding the block
	Kind   BlockKind // image or parity block
	Block  int       // index of the block among the node's blocks of that kind
	Stripe int       // stripe the block belongs to
	Offset int64     // byte offset of the block in its file (image, or share file including its header)
	Length int       // bytes of the block on disk
	Want   uint32    // crc32c recorded at encode time
	Got    uint32    // crc32c of the bytes read
}

// Error implements error.
func (e *CorruptError) Error() string {
	what := "is corrupt"
	if e.Kind == KindData {
		what = "is corrupt or was rewritten after the encode"
	}
	return fmt.Sprintf("parity: node %d: %s block %d (stripe %d, file offset %d, %d bytes) %s: crc32c %08x, recorded %08x",
		e.Node, e.Kind, e.Block, e.Stripe, e.Offset, e.Length, what, e.Got, e.Want)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

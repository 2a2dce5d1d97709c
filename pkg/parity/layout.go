package parity

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"iter"
)

// Limits and defaults of the ring layout.
const (
	// DefaultBlockSize is the block size used when Options.BlockSize is 0:
	// large enough that per-block costs (syscalls, channel hand-offs, pipe
	// wake-ups) vanish next to the memory traffic.
	DefaultBlockSize = 4 << 20
	// MinBlockSize is the smallest accepted block size. It only bounds the
	// metadata (one crc32c per block); real rings should use MiB blocks.
	MinBlockSize = 64
	// MaxBlockSize is the largest accepted block size.
	MaxBlockSize = 1 << 30
	// MinNodes is the smallest ring: with two nodes XOR parity degenerates
	// into mirroring.
	MinNodes = 3
	// MaxNodes is the largest ring.
	MaxNodes = 4096
	// MaxImageSize bounds a single image (4 PiB).
	MaxImageSize = 1 << 52
	// MaxBlocks bounds the number of data blocks of a whole ring, and so the
	// size of the schedule kept in memory. Use larger blocks beyond it.
	MaxBlocks = 1 << 26
)

// stripe is one row of the schedule: width data blocks, one from each of the
// nodes parity-width … parity-1 (mod N, in ring order), XORed into a parity
// block stored on node parity.
type stripe struct {
	parity int32 // node storing the parity block
	width  int32 // number of data blocks, 1 … N-1
	plen   int32 // bytes of the parity block on disk: longest data block
}

// Layout is the deterministic schedule shared by every node of a ring: the
// block size, every image size, and from them the list of stripes. All
// nodes (and a later recovery) must build it from the same block size and
// sizes; the parity share header records both.
//
// A Layout is immutable and safe for concurrent use.
type Layout struct {
	blockSize int
	sizes     []int64
	stripes   []stripe

	dataBlocks   []int   // per node: ceil(size/blockSize)
	parityBlocks []int   // per node: stripes whose parity it stores
	parityBytes  []int64 // per node: bytes of those parity blocks
}

// NewLayout computes the ring schedule for images of the given sizes, in
// ring order (node i sends to node i+1 mod N).
//
// The schedule is greedy. Let r[i] be the number of blocks node i has not
// yet contributed. Each stripe takes one block from every node of a run of
// consecutive nodes with r > 0 that ends just before its parity node, so the
// chain "first node of the run sends, every following node XORs its own
// block and forwards, the parity node stores" involves no node without data
// of its own. The parity node is the candidate with the longest run; among
// equally long runs, the one with the smallest r (the node with the least
// data left sits the stripe out and takes the parity, which keeps every node
// active as long as possible and levels image+parity per node); remaining
// ties go to the first node in rotation order after the previous stripe's
// parity node. With equal sizes this is exactly RAID-5 rotation: parity on
// node 0, 1, 2, … with the other N-1 nodes as data. For sizes within about
// 20% of each other it reaches the minimum number of stripes,
// max(max_i blocks_i, ceil(Σ blocks_i/(N-1))).
//
// Consequence (the invariant the tests check): node i takes part as a
// sender in exactly DataBlocks(i) stripes, so during an encode it sends
// exactly PaddedSize(i) = DataBlocks(i)·BlockSize bytes — its own image
// size rounded up to whole blocks — and never more, whatever N is.
func NewLayout(blockSize int, sizes []int64) (*Layout, error) {
	n := len(sizes)
	if n < MinNodes || n > MaxNodes {
		return nil, fmt.Errorf("%w: %d nodes, need %d to %d", ErrInvalid, n, MinNodes, MaxNodes)
	}
	if blockSize < MinBlockSize || blockSize > MaxBlockSize {
		return nil, fmt.Errorf("%w: block size %d outside [%d, %d]", ErrInvalid, blockSize, MinBlockSize, MaxBlockSize)
	}
	l := &Layout{
		blockSize:    blockSize,
		sizes:        append([]int64(nil), sizes...),
		dataBlocks:   make([]int, n),
		parityBlocks: make([]int, n),
		parityBytes:  make([]int64, n),
	}
	bs := int64(blockSize)
	total := 0
	for i, s := range sizes {
		if s < 0 || s > MaxImageSize {
			return nil, fmt.Errorf("%w: node %d: image size %d outside [0, %d]", ErrInvalid, i, s, int64(MaxImageSize))
		}
		b := (s + bs - 1) / bs
		if b > MaxBlocks || total+int(b) > MaxBlocks {
			return nil, fmt.Errorf("%w: more than %d blocks of %d bytes in the ring; use larger blocks", ErrInvalid, MaxBlocks, blockSize)
		}
		l.dataBlocks[i] = int(b)
		total += int(b)
	}
	l.schedule(total)
	return l, nil
}

// schedule fills l.stripes with the greedy schedule described at NewLayout.
func (l *Layout) schedule(total int) {
	n := len(l.sizes)
	remaining := append([]int(nil), l.dataBlocks...)
	active := 0
	for _, r := range remaining {
		if r > 0 {
			active++
		}
	}
	l.stripes = make([]stripe, 0, total/(n-1)+n)
	run := make([]int, n)
	last := n - 1 // so that the first stripe's parity goes to node 0
	for active > 0 {
		// run[j]: number of consecutive nodes with data ending at j,
		// walking leftwards. With every node active, every run is N-1.
		if active == n {
			for j := range run {
				run[j] = n - 1
			}
		} else {
			z := 0
			for remaining[z] > 0 {
				z++
			}
			run[z] = 0
			for t := 1; t <= n; t++ {
				j := (z + t) % n
				if remaining[j] > 0 {
					run[j] = run[(j+n-1)%n] + 1
				} else {
					run[j] = 0
				}
			}
		}
		bestP, bestW := -1, 0
		for t := 1; t <= n; t++ {
			p := (last + t) % n
			w := min(run[(p+n-1)%n], n-1)
			if w > bestW || w == bestW && w > 0 && remaining[p] < remaining[bestP] {
				bestP, bestW = p, w
			}
		}
		plen := 0
		for d := 1; d <= bestW; d++ {
			c := (bestP - d + n) % n
			j := l.dataBlocks[c] - remaining[c]
			plen = max(plen, l.blockLen(c, j))
			remaining[c]--
			if remaining[c] == 0 {
				active--
			}
		}
		l.stripes = append(l.stripes, stripe{parity: int32(bestP), width: int32(bestW), plen: int32(plen)})
		l.parityBlocks[bestP]++
		l.parityBytes[bestP] += int64(plen)
		last = bestP
	}
}

// N returns the number of nodes in the ring.
func (l *Layout) N() int { return len(l.sizes) }

// BlockSize returns the block size in bytes.
func (l *Layout) BlockSize() int { return l.blockSize }

// Size returns the image size of node i.
func (l *Layout) Size(i int) int64 { return l.sizes[i] }

// Sizes returns a copy of all image sizes, in ring order.
func (l *Layout) Sizes() []int64 { return append([]int64(nil), l.sizes...) }

// Stripes returns the number of stripes (= parity blocks in the ring).
func (l *Layout) Stripes() int { return len(l.stripes) }

// Stripe describes stripe k: its parity node, and its width data blocks,
// contributed by the nodes first, first+1, …, first+width-1 (mod N), which
// is also the order in which the partial XOR travels around the ring.
func (l *Layout) Stripe(k int) (parity, first, width int) {
	s := l.stripes[k]
	n := l.N()
	return int(s.parity), (int(s.parity) - int(s.width) + n) % n, int(s.width)
}

// DataBlocks returns the number of blocks of node i's image.
func (l *Layout) DataBlocks(i int) int { return l.dataBlocks[i] }

// PaddedSize returns node i's image size rounded up to whole blocks. It is
// exactly the number of payload bytes node i sends during an encode.
func (l *Layout) PaddedSize(i int) int64 { return int64(l.dataBlocks[i]) * int64(l.blockSize) }

// ParityBlocks returns the number of parity blocks node i stores.
func (l *Layout) ParityBlocks(i int) int { return l.parityBlocks[i] }

// ParityBytes returns the bytes of parity node i stores on disk. A parity
// block is as long as the longest data block of its stripe: the zero padding
// of short final blocks is never written.
func (l *Layout) ParityBytes(i int) int64 { return l.parityBytes[i] }

// blockLen returns the bytes of block j of node i on disk.
func (l *Layout) blockLen(i, j int) int {
	rest := l.sizes[i] - int64(j)*int64(l.blockSize)
	return int(min(rest, int64(l.blockSize)))
}

// fingerprint identifies the layout and the operation (encode, or recovery
// of node lost) for the optional link handshake.
func (l *Layout) fingerprint(lost int) [32]byte {
	h := sha256.New()
	var b [8]byte
	h.Write([]byte("ckpt parity ring v1\x00"))
	for _, v := range []int64{int64(formatVersion), int64(lost), int64(l.N()), int64(l.blockSize)} {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	for _, s := range l.sizes {
		binary.LittleEndian.PutUint64(b[:], uint64(s))
		h.Write(b[:])
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// role is what a node does in one stripe.
type role uint8

const (
	roleStart  role = iota + 1 // send own block to the right
	roleMiddle                 // receive, XOR own block (if any), send right
	roleSink                   // receive and store the result
)

// kind says where a block lives.
type kind uint8

const (
	kindNone   kind = iota // no block (forward unchanged)
	kindData               // a block of the node's image
	kindParity             // a block of the node's parity share
)

// blockRef locates a block of a node: its kind, index among blocks of that
// kind, byte offset in the image or share payload, and length on disk.
type blockRef struct {
	kind  kind
	index int
	off   int64
	len   int
}

// step is one node's part in one stripe.
type step struct {
	stripe int
	role   role
	own    blockRef // start/middle: the node's own contribution
	out    blockRef // sink: where the result goes
}

// plan yields node's steps in stripe order. With lost < 0 it is the encode
// plan; otherwise it is the plan that rebuilds node lost's image blocks and
// parity blocks on its replacement, which sits at the same ring position.
//
// Recovery chains: for every stripe that involves the lost node x, the
// surviving participants' blocks (data and parity) XOR to x's block. If x
// stored the parity, the chain is the encode chain. Otherwise the chain
// starts at x+1 and runs through every survivor to x-1; survivors that have
// no block in that stripe forward the partial XOR unchanged.
func (l *Layout) plan(node, lost int) iter.Seq[step] {
	return func(yield func(step) bool) {
		n := l.N()
		bs := int64(l.blockSize)
		dj, pj := 0, 0 // node's next data and parity block indices
		var poff int64 // node's next parity block offset in its share payload
		for k, s := range l.stripes {
			p, w := int(s.parity), int(s.width)
			first := (p - w + n) % n
			inArc := func(i int) bool { return (i-first+n)%n < w }
			var mine blockRef
			switch {
			case node == p:
				mine = blockRef{kind: kindParity, index: pj, off: poff, len: int(s.plen)}
				pj++
				poff += int64(s.plen)
			case inArc(node):
				mine = blockRef{kind: kindData, index: dj, off: int64(dj) * bs, len: l.blockLen(node, dj)}
				dj++
			}
			st := step{stripe: k}
			if lost < 0 {
				switch mine.kind {
				case kindParity:
					st.role, st.out = roleSink, mine
				case kindData:
					st.role, st.own = roleMiddle, mine
					if node == first {
						st.role = roleStart
					}
				default:
					continue
				}
			} else {
				x := lost
				if x != p && !inArc(x) {
					continue
				}
				if node == x {
					st.role, st.out = roleSink, mine
				} else {
					start := (x + 1) % n
					if x == p {
						start = first
					}
					d, chain := (node-start+n)%n, (x-start+n)%n
					if d >= chain {
						continue
					}
					st.role, st.own = roleMiddle, mine
					if d == 0 {
						st.role = roleStart
					}
				}
			}
			if !yield(st) {
				return
			}
		}
	}
}

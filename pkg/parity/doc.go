// Package parity protects the checkpoint images of N ≥ 3 nodes with XOR
// parity computed by the SCore-D ring algorithm, and rebuilds any single
// lost node — its image and its own parity share — byte-identical.
//
// # Ring algorithm
//
// The nodes form a ring in a fixed order: node i sends only to its
// right-hand neighbour i+1 and receives only from its left-hand neighbour
// i-1 (mod N). Each image is cut into blocks of BlockSize bytes (4 MiB by
// default; large blocks and a pipeline, not 1400-byte packets, are what make
// the ring run at memory or network speed). The last block of an image is
// padded with zeros logically: the padding travels on the links but is never
// written to disk.
//
// A stripe XORs one block from each of w consecutive nodes f, f+1, …, f+w-1
// (1 ≤ w ≤ N-1) into a parity block stored on the next node p = f+w. Node f
// sends its block to f+1; each following node XORs the block it receives
// with its own block (crypto/subtle.XORBytes) and forwards the result; after
// w-1 XORs (N-2 for a full stripe) node p receives the parity block and
// stores it. So every link carries one block per stripe it is part of, and
// all stripes flow through the ring at once: every node runs a five-stage
// pipeline (disk read, link receive, XOR, link send, disk write).
//
// The schedule (see NewLayout) rotates the parity node like RAID-5 — stripe
// k of equal-sized images stores its parity on node k mod N, the other N-1
// nodes supply data — and never asks a node without a block of its own to
// forward someone else's. Hence the invariant checked by the tests:
//
//	bytes node i sends = ceil(size_i / BlockSize) · BlockSize  (Layout.PaddedSize)
//
// exactly, whatever N is, and with equal sizes every node stores 1/(N-1)
// of its image size as parity (to within one block). With unequal sizes the
// node with the least data left takes the parity of the next stripe, so all
// nodes stay in the ring as long as possible and image+parity per node is
// levelled; for sizes within about 20% of each other the total parity is
// still the minimum, ceil(Σ blocks/(N-1)) blocks. The price of the
// invariant shows with very unequal images: once a node has no data left it
// cannot relay, the ring breaks into shorter chains, and the tail of an
// image longer than all others is mirrored (a one-block stripe's parity is
// a copy of it).
//
// # Recovery
//
// For every stripe the lost node x takes part in, the surviving blocks of
// that stripe (data and parity) XOR to x's block. The recovery ring puts a
// replacement node at x's ring position: if x held the stripe's parity, the
// chain is the encode chain; otherwise the chain starts at x+1 and runs
// through all survivors to x-1, survivors without a block forwarding the
// partial XOR unchanged, and the replacement stores the result as image
// block or parity block. The link x → x+1 is unused. RunSurvivor and
// RunReplacement are the per-node halves, usable across agents;
// RecoverDir runs the same ring with goroutines and io.Pipe. Every block a
// survivor contributes is checked against its recorded crc32c first, so a
// corrupt block is named (*CorruptError) instead of silently poisoning the
// result, and the rebuilt image is checked against its recorded digest
// (ImageDigestOf: a SHA-256 over the crc32c of its blocks, so that encoding
// never pays for a SHA-256 pass over the images).
//
// # Share file format
//
// Each node directory holds its image (image.ckpt) and its parity share
// (parity.ckpt, mode 0600, written to a temporary name, synced, renamed).
// The share starts with a checksummed header (see Header for the exact
// layout): magic "CKPTPAR\x00", format version, N, the node's index, the
// block size, a random encode ID common to the N shares, every image's size
// and digest, the crc32c of each block of the node's image and of each of
// its parity blocks, and a crc32c of the header itself. The parity blocks
// follow at the next 4096-byte boundary, back to back, each as long as the
// longest data block of its stripe. The schedule is a pure function of the
// block size and the sizes, so it is recomputed, not stored.
//
// # Entry points
//
// EncodeDirs and RecoverDir work on local node directories. RunNode,
// RunSurvivor and RunReplacement run one node over any pair of byte streams
// (io.Pipe, net.Pipe, TCP), for a coordinator driving one agent per node;
// Layout is the schedule they share and Header the share metadata the
// coordinator assembles from the nodes' NodeStats.
package parity

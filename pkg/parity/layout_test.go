package parity

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// layoutCases are schedules checked symbolically: sizes in bytes.
var layoutCases = []struct {
	name  string
	bs    int
	sizes []int64
}{
	{"n3-equal-1block", 64, []int64{64, 64, 64}},
	{"n3-equal", 64, []int64{640, 640, 640}},
	{"n3-zeros", 64, []int64{0, 0, 0}},
	{"n3-one-nonzero", 64, []int64{0, 1000, 0}},
	{"n3-mixed", 100, []int64{0, 1001, 399}},
	{"n4-equal", 64, []int64{64 * 9, 64 * 9, 64 * 9, 64 * 9}},
	{"n4-equal-uneven", 64, []int64{64 * 5, 64 * 5, 64 * 5, 64 * 5}},
	{"n4-mixed", 1000, []int64{12345, 1, 999, 4000}},
	{"n4-small-node", 64, []int64{640, 640, 640, 64}},
	{"n5-mixed", 512, []int64{5000, 0, 70000, 513, 4096}},
	{"n5-alternating", 64, []int64{6400, 64, 6400, 64, 6400}},
	{"n7-near-equal", 64, []int64{6400, 6464, 6336, 6400, 6500, 6300, 6401}},
}

// blockID names data block j of node i in the symbolic simulation.
func blockID(i, j int) int { return i<<20 | j }

type symSet = map[int]bool

func xorSym(a, b symSet) symSet {
	out := maps.Clone(a)
	if out == nil {
		out = symSet{}
	}
	for k := range b {
		if out[k] {
			delete(out, k)
		} else {
			out[k] = true
		}
	}
	return out
}

// simulate runs the plans of all nodes symbolically: a block is the set of
// data blocks XORed into it. Links are unbounded FIFOs; nodes advance in
// round-robin order as long as their next step can run, which fails the
// test on a deadlock. It returns, per node, the sets stored by its sinks in
// order, with their block references. parity holds the encode result (for
// recovery plans, where survivors contribute parity blocks).
func simulate(t *testing.T, l *Layout, lost int, parity [][]symSet) [][]struct {
	ref blockRef
	set symSet
} {
	t.Helper()
	n := l.N()
	plans := make([][]step, n)
	for i := range n {
		plans[i] = slices.Collect(l.plan(i, lost))
	}
	links := make([][]symSet, n) // links[i]: node i → node i+1
	pos := make([]int, n)
	out := make([][]struct {
		ref blockRef
		set symSet
	}, n)
	own := func(i int, r blockRef) symSet {
		switch r.kind {
		case kindData:
			return symSet{blockID(i, r.index): true}
		case kindParity:
			return parity[i][r.index]
		}
		return symSet{}
	}
	for {
		progress, done := false, true
		for i := range n {
			left := (i + n - 1) % n
			for pos[i] < len(plans[i]) {
				st := plans[i][pos[i]]
				if st.role != roleStart && len(links[left]) == 0 {
					break
				}
				if st.role != roleStart && left == lost {
					t.Fatalf("lost %d: node %d receives from the lost node", lost, i)
				}
				switch st.role {
				case roleStart:
					links[i] = append(links[i], own(i, st.own))
				case roleMiddle:
					v := links[left][0]
					links[left] = links[left][1:]
					links[i] = append(links[i], xorSym(v, own(i, st.own)))
				case roleSink:
					v := links[left][0]
					links[left] = links[left][1:]
					out[i] = append(out[i], struct {
						ref blockRef
						set symSet
					}{st.out, v})
				}
				if st.role != roleSink && i == lost {
					t.Fatalf("lost %d sends in stripe %d", lost, st.stripe)
				}
				pos[i]++
				progress = true
			}
			if pos[i] < len(plans[i]) {
				done = false
			}
		}
		if done {
			break
		}
		if !progress {
			t.Fatalf("lost %d: deadlock at steps %v", lost, pos)
		}
	}
	for i, q := range links {
		if len(q) != 0 {
			t.Fatalf("lost %d: %d blocks left on link %d→%d", lost, len(q), i, (i+1)%n)
		}
	}
	return out
}

// checkLayout verifies a layout: stripe shape, the byte invariant of the
// encode plans, and (symbolically) that encode stores the XOR of each
// stripe's data blocks and that recovery of every node yields exactly its
// blocks.
func checkLayout(t *testing.T, l *Layout) {
	t.Helper()
	n, bs := l.N(), l.BlockSize()
	next := make([]int, n)
	want := make([][]symSet, n) // want[p][q]: data blocks of p's q-th parity block
	wantLen := make([][]int, n)
	for k := range l.Stripes() {
		p, f, w := l.Stripe(k)
		if w < 1 || w > n-1 {
			t.Fatalf("stripe %d: width %d", k, w)
		}
		set, plen := symSet{}, 0
		for d := range w {
			c := (f + d) % n
			if c == p {
				t.Fatalf("stripe %d: parity node %d also holds data", k, p)
			}
			if next[c] >= l.DataBlocks(c) {
				t.Fatalf("stripe %d: node %d has no block left", k, c)
			}
			set[blockID(c, next[c])] = true
			plen = max(plen, l.blockLen(c, next[c]))
			next[c]++
		}
		want[p] = append(want[p], set)
		wantLen[p] = append(wantLen[p], plen)
	}
	for i := range n {
		if next[i] != l.DataBlocks(i) {
			t.Fatalf("node %d contributes %d blocks, has %d", i, next[i], l.DataBlocks(i))
		}
		if len(want[i]) != l.ParityBlocks(i) {
			t.Fatalf("node %d: %d parity blocks, ParityBlocks says %d", i, len(want[i]), l.ParityBlocks(i))
		}
	}

	// The invariant: in the encode plan node i is a sender (start or middle)
	// in exactly DataBlocks(i) stripes, each send is one BlockSize block, so
	// it sends exactly PaddedSize(i) bytes.
	for i := range n {
		sends, stored := 0, int64(0)
		for st := range l.plan(i, -1) {
			switch st.role {
			case roleStart, roleMiddle:
				sends++
				if st.own.kind != kindData {
					t.Fatalf("node %d stripe %d: sends without a block of its own", i, st.stripe)
				}
			case roleSink:
				stored += int64(st.out.len)
			}
		}
		if int64(sends)*int64(bs) != l.PaddedSize(i) || l.PaddedSize(i) != (l.Size(i)+int64(bs)-1)/int64(bs)*int64(bs) {
			t.Fatalf("node %d sends %d blocks of %d, padded size %d", i, sends, bs, l.PaddedSize(i))
		}
		if stored != l.ParityBytes(i) {
			t.Fatalf("node %d stores %d parity bytes, ParityBytes says %d", i, stored, l.ParityBytes(i))
		}
	}

	enc := simulate(t, l, -1, nil)
	parity := make([][]symSet, n)
	for i := range n {
		for q, o := range enc[i] {
			if o.ref.kind != kindParity || o.ref.index != q || o.ref.len != wantLen[i][q] {
				t.Fatalf("node %d sink %d: ref %+v, want parity %d len %d", i, q, o.ref, q, wantLen[i][q])
			}
			if !maps.Equal(o.set, want[i][q]) {
				t.Fatalf("node %d parity %d = %v, want %v", i, q, slices.Sorted(maps.Keys(o.set)), slices.Sorted(maps.Keys(want[i][q])))
			}
			parity[i] = append(parity[i], o.set)
		}
	}
	for x := range n {
		rec := simulate(t, l, x, parity)
		d, q := 0, 0
		for _, o := range rec[x] {
			switch o.ref.kind {
			case kindData:
				if o.ref.index != d || !maps.Equal(o.set, symSet{blockID(x, d): true}) {
					t.Fatalf("lost %d: image block %d rebuilt as %v", x, d, o.set)
				}
				d++
			case kindParity:
				if o.ref.index != q || !maps.Equal(o.set, parity[x][q]) {
					t.Fatalf("lost %d: parity block %d rebuilt as %v", x, q, o.set)
				}
				q++
			}
		}
		if d != l.DataBlocks(x) || q != l.ParityBlocks(x) {
			t.Fatalf("lost %d: rebuilt %d image and %d parity blocks, want %d and %d", x, d, q, l.DataBlocks(x), l.ParityBlocks(x))
		}
		for i := range n {
			if i != x && len(rec[i]) != 0 {
				t.Fatalf("lost %d: survivor %d stores blocks", x, i)
			}
		}
	}
}

func TestLayoutSchedule(t *testing.T) {
	for _, c := range layoutCases {
		t.Run(c.name, func(t *testing.T) {
			l, err := NewLayout(c.bs, c.sizes)
			if err != nil {
				t.Fatal(err)
			}
			checkLayout(t, l)
		})
	}
	r := rand.New(rand.NewPCG(7, 7))
	for it := range 200 {
		n := MinNodes + r.IntN(6)
		sizes := make([]int64, n)
		for i := range sizes {
			sizes[i] = r.Int64N(64 * 30)
		}
		t.Run(fmt.Sprintf("random%d-%v", it, sizes), func(t *testing.T) {
			l, err := NewLayout(64, sizes)
			if err != nil {
				t.Fatal(err)
			}
			checkLayout(t, l)
		})
	}
}

// TestLayoutRotation: with equal sizes, parity rotates like RAID-5 and every
// node stores 1/(N-1) of its data as parity, to within one block.
func TestLayoutRotation(t *testing.T) {
	for n := MinNodes; n <= 8; n++ {
		for _, blocks := range []int{1, 2, n - 1, 5 * (n - 1), 5*(n-1) + 1, 37} {
			sizes := slices.Repeat([]int64{int64(blocks) * 64}, n)
			l, err := NewLayout(64, sizes)
			if err != nil {
				t.Fatal(err)
			}
			for k := range min(l.Stripes(), n) {
				if p, _, w := l.Stripe(k); blocks >= n-1 && (p != k || w != n-1) {
					t.Errorf("n=%d blocks=%d: stripe %d has parity on %d width %d, want %d width %d", n, blocks, k, p, w, k, n-1)
				}
			}
			ideal := float64(blocks) / float64(n-1)
			for i := range n {
				if got := float64(l.ParityBlocks(i)); got < ideal-1 || got > ideal+1 {
					t.Errorf("n=%d blocks=%d: node %d stores %v parity blocks, want %.2f±1", n, blocks, i, got, ideal)
				}
			}
			if want := (n*blocks + n - 2) / (n - 1); l.Stripes() != want {
				t.Errorf("n=%d blocks=%d: %d stripes, want %d", n, blocks, l.Stripes(), want)
			}
		}
	}
}

// TestLayoutNearEqualIsOptimal: for images within 10% of each other the
// schedule uses the minimum number of stripes, max(max blocks, ceil(total
// blocks/(N-1))), so total parity is 1/(N-1) of the data.
func TestLayoutNearEqualIsOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := MinNodes + r.IntN(8)
		base := 50 + r.IntN(400)
		sizes := make([]int64, n)
		for i := range sizes {
			sizes[i] = int64(base+r.IntN(base/10+1)) * 64
		}
		l, err := NewLayout(64, sizes)
		if err != nil {
			t.Fatal(err)
		}
		mx, sum := 0, 0
		for i := range n {
			mx, sum = max(mx, l.DataBlocks(i)), sum+l.DataBlocks(i)
		}
		if lb := max(mx, (sum+n-2)/(n-1)); l.Stripes() != lb {
			t.Fatalf("sizes %v: %d stripes, lower bound %d", sizes, l.Stripes(), lb)
		}
	}
}

func TestNewLayoutErrors(t *testing.T) {
	for _, c := range []struct {
		bs    int
		sizes []int64
	}{
		{64, []int64{1, 2}},
		{63, []int64{1, 2, 3}},
		{MaxBlockSize + 1, []int64{1, 2, 3}},
		{64, []int64{1, -1, 3}},
		{64, []int64{1, MaxImageSize + 1, 3}},
		{64, []int64{1, 64 * (MaxBlocks + 1), 3}},
	} {
		if _, err := NewLayout(c.bs, c.sizes); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewLayout(%d, %v) = %v, want ErrInvalid", c.bs, c.sizes, err)
		}
	}
}

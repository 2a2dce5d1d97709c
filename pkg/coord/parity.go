package coord

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/ckpt/ckpt/pkg/agent"
	"github.com/ckpt/ckpt/pkg/parity"
)

// ParityReport tells what a parity ring across agents did: per node, the
// bytes it sent to its right-hand neighbour and the bytes it stored.
type ParityReport struct {
	Op        string             `json:"op"` // "encode" or "recover"
	N         int                `json:"n"`
	BlockSize int                `json:"block_size"`
	Lost      int                `json:"lost"` // -1 for an encode
	Sizes     []int64            `json:"sizes"`
	Nodes     []parity.NodeStats `json:"nodes"`
	Bytes     int64              `json:"bytes"` // encode: Σ image sizes; recover: rebuilt image + share
	Duration  time.Duration      `json:"duration_ns"`
	MBps      float64            `json:"mb_per_s"`
}

// ring runs one ring: sessions[i] is ring position i. It collects each
// node's listening address (from listening[i] if the caller already read
// that event), tells each node its right-hand neighbour and waits for every
// node's stats; on any failure it aborts them all. The caller says finish.
func (c *Coordinator) ring(ctx context.Context, op string, ss []*session, listening map[int]agent.Event, rights func(addrs []string, i int) string) ([]parity.NodeStats, error) {
	g := newGroup(c, ctx, ss) // the caller closes the sessions
	n := len(ss)
	addrs := make([]string, n)
	fail := func(err error) ([]parity.NodeStats, error) {
		g.abortNow(agent.EvListening, agent.EvStats)
		return nil, fmt.Errorf("parity %s: %w: %w", op, ErrAborted, err)
	}
	// await cannot hand back event fields: read EvListening directly.
	for i, s := range ss {
		for addrs[i] == "" {
			ev, ok := listening[i]
			if !ok {
				ev = s.next(ctx, c.timeout())
			}
			if ev.Event == agent.EvListening {
				addrs[i] = ev.Addr
				if addrs[i] == "" {
					addrs[i] = "-" // needs no left link
				}
				continue
			}
			if ev.Event == agent.EvOK || ev.Event == agent.EvError {
				g.final[i] = &ev
				return fail(fmt.Errorf("%s: %s", s.name, ev.Error))
			}
		}
	}
	for i, s := range ss {
		if err := s.conn.Send(agent.Request{Op: agent.OpConnect, Right: rights(addrs, i)}); err != nil {
			return fail(fmt.Errorf("%s: %w", s.name, err))
		}
	}
	stats := make([]parity.NodeStats, n)
	for i, s := range ss {
		for {
			ev := s.next(ctx, c.timeout())
			if ev.Event == agent.EvStats && ev.Stats != nil {
				stats[i] = *ev.Stats
				break
			}
			if ev.Event == agent.EvOK || ev.Event == agent.EvError {
				g.final[i] = &ev
				return fail(fmt.Errorf("%s: %s", s.name, ev.Error))
			}
		}
	}
	return stats, nil
}

// finish sends each session its finish request and waits for EvOK.
func (c *Coordinator) finish(ctx context.Context, ss []*session, req agent.Request) error {
	g := newGroup(c, ctx, ss)
	for _, s := range ss {
		if err := s.conn.Send(req); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return g.await(agent.EvOK)
}

// Encode computes XOR parity across the members' images with the ring
// algorithm, the ring running over TCP between the agents, in member order.
func (c *Coordinator) Encode(ctx context.Context, m *Manifest) (*ParityReport, error) {
	start := time.Now()
	n := len(m.Members)
	if err := checkMembers(m.Members, true); err != nil {
		return nil, err
	}
	sizes := make([]int64, n)
	for i, mb := range m.Members {
		var ev agent.Event
		if err := c.simple(ctx, mb.Agent, agent.Request{Op: agent.OpImageSize, Image: m.ImageOf(i)}, &ev); err != nil {
			return nil, fmt.Errorf("parity: member %s: %w", mb, err)
		}
		sizes[i] = ev.Size
	}
	bs := m.BlockSize
	if bs == 0 {
		bs = parity.DefaultBlockSize
	}
	l, err := parity.NewLayout(bs, sizes)
	if err != nil {
		return nil, err
	}
	reqs := make([]agent.Request, n)
	for i := range m.Members {
		reqs[i] = agent.Request{Op: agent.OpParityEncode, Image: m.ImageOf(i), Index: i, BlockSize: bs, Sizes: sizes}
	}
	ss, err := c.openAll(ctx, memberNames(m.Members), memberAgents(m.Members), reqs, agent.EvListening, agent.EvStats)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, s := range ss {
			s.conn.Close()
		}
	}()
	stats, err := c.ring(ctx, "encode", ss, nil, func(addrs []string, i int) string { return addrs[(i+1)%n] })
	if err != nil {
		return nil, err
	}
	var id [16]byte
	rand.Read(id[:])
	hashes := make([][32]byte, n)
	for i, st := range stats {
		hashes[i] = st.ImageDigest
	}
	if err := c.finish(ctx, ss, agent.Request{Op: agent.OpFinish, EncodeID: id, Hashes: hashes}); err != nil {
		return nil, fmt.Errorf("parity encode: %w", err)
	}
	r := &ParityReport{Op: "encode", N: n, BlockSize: l.BlockSize(), Lost: -1, Sizes: sizes, Nodes: stats, Duration: time.Since(start)}
	for _, s := range sizes {
		r.Bytes += s
	}
	r.MBps = float64(r.Bytes) / r.Duration.Seconds() / 1e6
	return r, nil
}

// Recover rebuilds the image (and parity share) of member lost on the
// spare node whose agent is spare, from the surviving members' images and
// shares, with the recovery ring running between the agents. It returns
// the manifest with member lost moved to spare.
func (c *Coordinator) Recover(ctx context.Context, m *Manifest, lost int, spare string) (*Manifest, *ParityReport, error) {
	start := time.Now()
	n := len(m.Members)
	if lost < 0 || lost >= n {
		return nil, nil, fmt.Errorf("recover: no member %d in a group of %d", lost, n)
	}
	for i, mb := range m.Members {
		if i != lost && mb.Agent == spare {
			return nil, nil, fmt.Errorf("recover: spare %s already holds member %s", spare, mb)
		}
	}
	// Survivors first: their share headers say what to rebuild.
	ss := make([]*session, n)
	defer func() {
		for _, s := range ss {
			if s != nil {
				s.conn.Close()
			}
		}
	}()
	for i, mb := range m.Members {
		if i == lost {
			continue
		}
		s, err := open(ctx, "member "+mb.String(), mb.Agent, agent.Request{Op: agent.OpParitySurvive, Image: m.ImageOf(i), Lost: lost})
		if err != nil {
			return nil, nil, err
		}
		ss[i] = s
	}
	var ref []byte
	listening := map[int]agent.Event{} // read here for the headers, handed to ring()
	for i, s := range ss {
		if s == nil {
			continue
		}
		ev := s.next(ctx, c.timeout())
		if ev.Event != agent.EvListening {
			g := newGroup(c, ctx, compact(ss))
			g.abortNow(agent.EvListening)
			return nil, nil, fmt.Errorf("recover: %w: %s: %s", ErrAborted, s.name, ev.Error)
		}
		if ev.Index != i {
			g := newGroup(c, ctx, compact(ss))
			g.abortNow(agent.EvListening)
			return nil, nil, fmt.Errorf("recover: %s holds the parity share of ring position %d, the manifest says %d", s.name, ev.Index, i)
		}
		ref = ev.Header
		listening[i] = ev
	}
	rs, err := open(ctx, "spare "+spare, spare, agent.Request{Op: agent.OpParityReplace, Image: m.ImageOf(lost), Lost: lost, Header: ref})
	if err != nil {
		g := newGroup(c, ctx, compact(ss))
		g.abortNow(agent.EvListening)
		return nil, nil, err
	}
	ss[lost] = rs
	h, err := parity.DecodeHeader(ref)
	if err != nil {
		return nil, nil, err
	}
	stats, err := c.ring(ctx, "recover", ss, listening, func(addrs []string, i int) string {
		if i == lost {
			return "" // the link from the lost node is unused
		}
		a := addrs[(i+1)%n]
		if a == "-" {
			return ""
		}
		return a
	})
	if err != nil {
		return nil, nil, err
	}
	if err := c.finish(ctx, ss, agent.Request{Op: agent.OpFinish}); err != nil {
		return nil, nil, fmt.Errorf("recover: %w", err)
	}
	l, _ := parity.NewLayout(h.BlockSize, h.Sizes)
	out := *m
	out.Members = append([]Member(nil), m.Members...)
	out.Members[lost].Agent = spare
	r := &ParityReport{Op: "recover", N: n, BlockSize: h.BlockSize, Lost: lost, Sizes: h.Sizes, Nodes: stats,
		Bytes: h.Sizes[lost] + l.ParityBytes(lost), Duration: time.Since(start)}
	r.MBps = float64(r.Bytes) / r.Duration.Seconds() / 1e6
	return &out, r, nil
}

func compact(ss []*session) []*session {
	var out []*session
	for _, s := range ss {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

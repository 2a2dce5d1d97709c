package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ckpt/ckpt/pkg/agent"
)

// CheckpointOptions tune a group checkpoint.
type CheckpointOptions struct {
	// Kill kills the members once every image is complete, instead of
	// letting them run on.
	Kill bool
	// Parity computes XOR parity across the members' images afterwards
	// (one member per node, at least 3).
	Parity bool
	// BlockSize is the parity ring block size; 0 means the default.
	BlockSize int
}

func memberNames(ms []Member) []string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = "member " + m.String()
	}
	return names
}

func memberAgents(ms []Member) []string {
	addrs := make([]string, len(ms))
	for i, m := range ms {
		addrs[i] = m.Agent
	}
	return addrs
}

// Checkpoint dumps every member consistently into its node's storage,
// under name, and returns the group's manifest.
func (c *Coordinator) Checkpoint(ctx context.Context, name string, members []Member, opts CheckpointOptions) (*Manifest, *Report, error) {
	start := time.Now()
	if err := checkMembers(members, opts.Parity); err != nil {
		return nil, nil, err
	}
	m := &Manifest{Name: name, Created: start.UTC(), Members: members, Parity: opts.Parity, BlockSize: opts.BlockSize}
	reqs := make([]agent.Request, len(members))
	for i, mb := range members {
		reqs[i] = agent.Request{Op: agent.OpDump, PID: mb.PID, Image: m.ImageOf(i), LeaveRunning: !opts.Kill}
	}
	c.logf("checkpoint %s: %d members", name, len(members))
	rep, err := c.dumpGroup(ctx, "checkpoint", members, reqs, nil)
	if err != nil {
		// Nothing of a failed group checkpoint may look complete.
		c.removeImages(ctx, m)
		return nil, nil, err
	}
	if opts.Parity {
		pr, err := c.Encode(ctx, m)
		if err != nil {
			return m, rep, fmt.Errorf("checkpoint %s: images written, parity failed: %w", name, err)
		}
		rep.Parity = pr
	}
	rep.Duration = time.Since(start)
	return m, rep, nil
}

func checkMembers(members []Member, parity bool) error {
	if len(members) == 0 {
		return errors.New("group: no members")
	}
	seen := map[string]bool{}
	nodes := map[string]bool{}
	for _, m := range members {
		if seen[m.String()] {
			return fmt.Errorf("group: member %s given twice", m)
		}
		seen[m.String()] = true
		if parity && nodes[m.Agent] {
			return fmt.Errorf("group: parity protects against the loss of one node, but node %s has two members", m.Agent)
		}
		nodes[m.Agent] = true
	}
	if parity && len(members) < 3 {
		return fmt.Errorf("group: parity needs at least 3 nodes, got %d", len(members))
	}
	return nil
}

// dumpGroup runs dump sessions through the freeze and prepare barriers
// and commits them all, or aborts them all. extra sessions (transfer
// receivers) are only watched: they fail the group if they fail before
// the commit.
func (c *Coordinator) dumpGroup(ctx context.Context, op string, members []Member, reqs []agent.Request, recv *group) (*Report, error) {
	start := time.Now()
	ss, err := c.openAll(ctx, memberNames(members), memberAgents(members), reqs, agent.EvFrozen, agent.EvPrepared)
	if err != nil {
		return nil, err
	}
	g := newGroup(c, ctx, ss)
	defer g.close()
	fail := func(err error) (*Report, error) {
		g.abortNow(agent.EvFrozen, agent.EvPrepared)
		if recv != nil {
			recv.abortNow()
		}
		return nil, fmt.Errorf("%s: %w: %w", op, ErrAborted, err)
	}
	if err := g.await(agent.EvFrozen); err != nil {
		return fail(err)
	}
	c.logf("%s: all %d members frozen in %v", op, len(members), time.Since(start).Round(time.Millisecond))
	if err := g.decide(agent.OpContinue); err != nil {
		return fail(err)
	}
	if err := g.await(agent.EvPrepared); err != nil {
		return fail(err)
	}
	c.logf("%s: all %d images complete in %v", op, len(members), time.Since(start).Round(time.Millisecond))
	if err := g.decide(agent.OpCommit); err != nil {
		// Some members may have committed: that is reported, not hidden.
		g.abort()
		return nil, fmt.Errorf("%s: commit: %w", op, err)
	}
	frozen := time.Since(start)
	err = g.await(agent.EvOK)
	rep := &Report{Op: op, Frozen: frozen}
	for i, f := range g.final {
		rep.Members = append(rep.Members, MemberResult{Member: members[i], Result: f.Result})
	}
	if err != nil {
		return rep, fmt.Errorf("%s: after the commit: %w", op, err)
	}
	return rep, nil
}

// removeImages deletes the images of a failed checkpoint (best effort).
func (c *Coordinator) removeImages(ctx context.Context, m *Manifest) {
	for i, mb := range m.Members {
		if err := c.Remove(ctx, m, i); err != nil {
			c.logf("remove %s on %s: %v", m.ImageOf(i), mb.Agent, err)
		}
	}
}

// simple runs a request without barriers and returns its final event.
func (c *Coordinator) simple(ctx context.Context, addr string, req agent.Request, out *agent.Event) error {
	s, err := open(ctx, addr, addr, req)
	if err != nil {
		return err
	}
	defer s.conn.Close()
	for {
		ev := s.next(ctx, c.timeout())
		switch ev.Event {
		case agent.EvOK:
			if out != nil {
				*out = ev
			}
			return nil
		case agent.EvError:
			return fmt.Errorf("agent %s: %s", addr, ev.Error)
		}
	}
}

// Exec starts argv on the node of agent addr and returns its PID there.
func (c *Coordinator) Exec(ctx context.Context, addr string, argv []string, stdout string) (int, error) {
	var ev agent.Event
	if err := c.simple(ctx, addr, agent.Request{Op: agent.OpExec, Argv: argv, Stdout: stdout}, &ev); err != nil {
		return 0, err
	}
	return ev.PID, nil
}

// Kill kills the members, each with its descendants, and waits until
// they are gone.
func (c *Coordinator) Kill(ctx context.Context, members []Member) error {
	var errs []error
	for _, m := range members {
		if err := c.simple(ctx, m.Agent, agent.Request{Op: agent.OpKill, PIDs: []int{m.PID}}, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Hello asks the agent at addr who it is.
func (c *Coordinator) Hello(ctx context.Context, addr string) (agent.Event, error) {
	var ev agent.Event
	err := c.simple(ctx, addr, agent.Request{Op: agent.OpHello}, &ev)
	return ev, err
}

// Remove deletes member i's image from its node.
func (c *Coordinator) Remove(ctx context.Context, m *Manifest, i int) error {
	return c.simple(ctx, m.Members[i].Agent, agent.Request{Op: agent.OpRemove, Image: m.ImageOf(i)}, nil)
}

// Restore brings the whole group back from its images: every member is
// built and held stopped (connections live but behind its node's lock),
// then all are released together, so no restored connection sees a peer
// that does not exist yet. rules (the text of a rules file) is applied on
// every node if not empty.
func (c *Coordinator) Restore(ctx context.Context, m *Manifest, rules string) (*Report, error) {
	start := time.Now()
	reqs := make([]agent.Request, len(m.Members))
	for i := range m.Members {
		reqs[i] = agent.Request{Op: agent.OpRestore, Image: m.ImageOf(i), Rules: rules}
	}
	ss, err := c.openAll(ctx, memberNames(m.Members), memberAgents(m.Members), reqs, agent.EvBuilt)
	if err != nil {
		return nil, err
	}
	g := newGroup(c, ctx, ss)
	defer g.close()
	if err := g.await(agent.EvBuilt); err != nil {
		g.abortNow(agent.EvBuilt)
		return nil, fmt.Errorf("restore %s: %w: %w", m.Name, ErrAborted, err)
	}
	c.logf("restore %s: all %d members built in %v", m.Name, len(m.Members), time.Since(start).Round(time.Millisecond))
	if err := g.decide(agent.OpRelease); err != nil {
		g.abort()
		return nil, fmt.Errorf("restore %s: release: %w", m.Name, err)
	}
	err = g.await(agent.EvOK)
	rep := &Report{Op: "restore", Duration: time.Since(start)}
	for i, f := range g.final {
		rep.Members = append(rep.Members, MemberResult{Member: m.Members[i], Result: f.Result})
	}
	if err != nil {
		return rep, fmt.Errorf("restore %s: %w", m.Name, err)
	}
	return rep, nil
}

// Migrate moves every member, while it runs, to the node of dests[i]:
// each destination listens, each source streams its image straight to it,
// and the destination builds the processes while the image arrives. The
// sources are killed only once every destination holds its copy; if any
// step fails before, every destination discards its copy and every source
// resumes. rules (the text of a rules file) moves the TCP endpoints.
func (c *Coordinator) Migrate(ctx context.Context, members []Member, dests []string, rules string) ([]Member, *Report, error) {
	start := time.Now()
	if len(dests) != len(members) {
		return nil, nil, fmt.Errorf("migrate: %d members but %d destinations", len(members), len(dests))
	}
	if err := checkMembers(members, false); err != nil {
		return nil, nil, err
	}
	names := make([]string, len(dests))
	rreqs := make([]agent.Request, len(dests))
	for i, d := range dests {
		names[i] = "destination " + d
		rreqs[i] = agent.Request{Op: agent.OpRestore, Listen: true, Rules: rules}
	}
	rs, err := c.openAll(ctx, names, dests, rreqs)
	if err != nil {
		return nil, nil, err
	}
	recv := newGroup(c, ctx, rs)
	defer recv.close()
	addrs := make([]string, len(dests))
	// Wait for every receiver's address.
	for i, s := range rs {
		for addrs[i] == "" {
			ev := s.next(ctx, c.timeout())
			switch ev.Event {
			case agent.EvListening:
				addrs[i] = ev.Addr
			case agent.EvOK, agent.EvError:
				recv.final[i] = &ev
				recv.abortNow()
				return nil, nil, fmt.Errorf("migrate: %w: %s: %s", ErrAborted, names[i], ev.Error)
			}
		}
	}
	reqs := make([]agent.Request, len(members))
	for i, mb := range members {
		reqs[i] = agent.Request{Op: agent.OpDump, PID: mb.PID, To: addrs[i]}
	}
	c.logf("migrate: %d members to %v", len(members), addrs)
	rep, err := c.dumpGroup(ctx, "migrate", members, reqs, recv)
	if err != nil {
		return nil, nil, err
	}
	// The receivers report "built", "released", then their result.
	if err := recv.await(agent.EvOK); err != nil {
		return nil, rep, fmt.Errorf("migrate: sources are gone, but: %w", err)
	}
	moved := make([]Member, len(members))
	for i, mb := range members {
		moved[i] = Member{Agent: dests[i], PID: mb.PID}
		var r struct {
			PID int `json:"pid"`
		}
		if f := recv.final[i]; f != nil && json.Unmarshal(f.Result, &r) == nil && r.PID != 0 {
			moved[i].PID = r.PID
		}
	}
	rep.Extra = map[string]any{"restored": resultsOf(recv)}
	rep.Duration = time.Since(start)
	return moved, rep, nil
}

func resultsOf(g *group) []json.RawMessage {
	var out []json.RawMessage
	for _, f := range g.final {
		if f != nil {
			out = append(out, f.Result)
		}
	}
	return out
}

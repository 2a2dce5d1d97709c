// Package coord drives group operations across the agents of several
// nodes: a consistent checkpoint of a parallel job, its XOR parity, the
// recovery of a lost node's image to a spare node, the restore of the whole
// job, and its migration to other nodes by peer-to-peer transfer.
//
// # Consistency
//
// A group checkpoint runs every member's dump in three phases separated by
// barriers: every member is frozen and its node's network lock is in place
// (EvFrozen); every image is complete (EvPrepared: written and synced, or
// held by the receiving node); then every member is resumed, or killed for
// a migration (commit). No member runs again before every member's state is
// read, and no packet between members crosses a node while any of them is
// being read, so what is in kernel socket queues is saved exactly once (by
// TCP repair, on the side that holds it) and what was on the wire is dropped
// by the lock and retransmitted by TCP after the restore.
//
// If any member fails at any point before the commit, the whole group is
// aborted: every agent that reached a barrier is told "abort", every one
// still working is told at its next barrier, and the coordinator waits
// until each has answered, so that no node is left frozen or locked.
package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ckpt/ckpt/pkg/agent"
)

// ErrAborted means the group operation was aborted because a member
// failed; every member is back as it was.
var ErrAborted = errors.New("group operation aborted")

// Member is one process of a group (with its descendants), on the node
// whose agent listens at Agent.
type Member struct {
	Agent string `json:"agent"`
	PID   int    `json:"pid"`
}

// String is the PID@AGENT form used on the command line.
func (m Member) String() string { return fmt.Sprintf("%d@%s", m.PID, m.Agent) }

// ParseMember parses PID@AGENT.
func ParseMember(s string) (Member, error) {
	p, a, ok := strings.Cut(s, "@")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 || a == "" {
		return Member{}, fmt.Errorf("member %q: want PID@AGENT (AGENT is HOST:PORT or unix:PATH)", s)
	}
	return Member{Agent: a, PID: pid}, nil
}

// Manifest describes a group checkpoint: where each member's image is.
// The member order is the parity ring order.
type Manifest struct {
	Name      string    `json:"name"`
	Created   time.Time `json:"created"`
	Members   []Member  `json:"members"`
	Parity    bool      `json:"parity"`
	BlockSize int       `json:"block_size,omitempty"`
}

// ImageOf is the image directory of member i, relative to its agent's
// root.
func (m *Manifest) ImageOf(i int) string {
	return path.Join(m.Name, strconv.Itoa(m.Members[i].PID))
}

// Load reads a manifest file.
func Load(file string) (*Manifest, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("group manifest: %w", err)
	}
	m := new(Manifest)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("group manifest %s: %w", file, err)
	}
	if m.Name == "" || len(m.Members) == 0 {
		return nil, fmt.Errorf("group manifest %s: no name or no members", file)
	}
	return m, nil
}

// Save writes the manifest to file (0600, via a temporary name).
func (m *Manifest) Save(file string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("group manifest: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("group manifest: %w", err)
	}
	return nil
}

// MemberResult is what one member's operation reported.
type MemberResult struct {
	Member Member          `json:"member"`
	Result json.RawMessage `json:"result,omitempty"` // the tool's --json output
}

// Report describes a group operation.
type Report struct {
	Op       string         `json:"op"`
	Members  []MemberResult `json:"members"`
	Duration time.Duration  `json:"duration_ns"`
	// Frozen is the time from the first dump request to the commit
	// (checkpoint, migration): how long the slowest member was frozen
	// at most.
	Frozen time.Duration  `json:"frozen_ns,omitempty"`
	Parity *ParityReport  `json:"parity,omitempty"`
	Extra  map[string]any `json:"extra,omitempty"`
}

// Coordinator runs group operations.
type Coordinator struct {
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
	// Timeout bounds each barrier wait; 0 means 10 minutes.
	Timeout time.Duration
	// Progress, if set, is called with the bytes of memory the members'
	// dumps have written so far, and their total.
	Progress func(done, total int64)
}

func (c *Coordinator) logf(format string, args ...any) {
	if c.Log != nil {
		c.Log(format, args...)
	}
}

func (c *Coordinator) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 10 * time.Minute
}

// session is one agent operation in progress.
type session struct {
	name string
	conn *agent.Conn
	// arrivals gets the barrier event name (or "" on an informational
	// event that the caller asked for), final the last event.
	events chan agent.Event
}

// open starts req on the agent at addr; its events arrive on s.events
// until the final one (EvOK or EvError, or a synthetic EvError if the
// connection breaks).
func open(ctx context.Context, name, addr string, req agent.Request) (*session, error) {
	conn, err := agent.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := conn.Send(req); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s := &session{name: name, conn: conn, events: make(chan agent.Event, 16)}
	go func() {
		defer close(s.events)
		for {
			var ev agent.Event
			if err := conn.Recv(&ev); err != nil {
				s.events <- agent.Event{Event: agent.EvError, Error: fmt.Sprintf("agent %s: %v", addr, err)}
				return
			}
			s.events <- ev
			if ev.Event == agent.EvOK || ev.Event == agent.EvError {
				return
			}
		}
	}()
	return s, nil
}

// next waits for the session's next event.
func (s *session) next(ctx context.Context, timeout time.Duration) agent.Event {
	select {
	case ev, ok := <-s.events:
		if !ok {
			return agent.Event{Event: agent.EvError, Error: "connection closed"}
		}
		return ev
	case <-ctx.Done():
		return agent.Event{Event: agent.EvError, Error: ctx.Err().Error()}
	case <-time.After(timeout):
		return agent.Event{Event: agent.EvError, Error: fmt.Sprintf("no answer in %v", timeout), Timeout: true}
	}
}

func (s *session) send(op string) error { return s.conn.Send(agent.Request{Op: op}) }

// group runs a set of sessions through barriers.
type group struct {
	c        *Coordinator
	ctx      context.Context
	sessions []*session
	final    []*agent.Event // per session, once it ended

	mu       sync.Mutex
	progress map[int][2]int64 // per session: done, total
}

// report records one member's progress and reports the group's.
func (g *group) report(i int, ev agent.Event) {
	if g.c.Progress == nil {
		return
	}
	g.mu.Lock()
	if g.progress == nil {
		g.progress = map[int][2]int64{}
	}
	g.progress[i] = [2]int64{ev.Done, ev.Total}
	var done, total int64
	for _, p := range g.progress {
		done, total = done+p[0], total+p[1]
	}
	g.c.Progress(done, total) // under g.mu: one call at a time
	g.mu.Unlock()
}

// await waits until every live session reports event (skipping
// informational events). A session that ends instead fails the group.
func (g *group) await(event string) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i, s := range g.sessions {
		if g.final[i] != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ev := s.next(g.ctx, g.c.timeout())
				switch ev.Event {
				case agent.EvOK, agent.EvError:
					if ev.Timeout {
						s.send(agent.OpAbort) // best effort: its connection closes too
					}
					mu.Lock()
					g.final[i] = &ev
					if ev.Event == agent.EvError {
						errs = append(errs, fmt.Errorf("%s: %s", s.name, ev.Error))
					} else if event != agent.EvOK {
						errs = append(errs, fmt.Errorf("%s: ended before %q", s.name, event))
					}
					mu.Unlock()
					return
				case event:
					return
				case agent.EvProgress:
					g.report(i, ev)
				}
				// Anything else is informational ("built" and "released"
				// from a receiver, say): read on.
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// decide sends op to every live session.
func (g *group) decide(op string) error {
	var errs []error
	for i, s := range g.sessions {
		if g.final[i] == nil {
			if err := s.send(op); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// abort tells every live session "abort" at each barrier it still reaches
// and waits until all have ended.
func (g *group) abort(barriers ...string) {
	for i, s := range g.sessions {
		if g.final[i] != nil {
			continue
		}
		for g.final[i] == nil {
			ev := s.next(g.ctx, g.c.timeout())
			switch {
			case ev.Event == agent.EvOK || ev.Event == agent.EvError:
				g.final[i] = &ev
			case contains(barriers, ev.Event):
				s.send(agent.OpAbort)
			}
		}
	}
}

// abortNow tells the sessions waiting at a barrier to abort, then drains
// everything.
func (g *group) abortNow(barriers ...string) {
	g.decide(agent.OpAbort)
	g.abort(barriers...)
}

func (g *group) close() {
	for _, s := range g.sessions {
		s.conn.Close()
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func newGroup(c *Coordinator, ctx context.Context, sessions []*session) *group {
	return &group{c: c, ctx: ctx, sessions: sessions, final: make([]*agent.Event, len(sessions))}
}

// openAll opens one session per request. If one cannot be opened, the
// ones already started are aborted (and waited for) before it returns.
func (c *Coordinator) openAll(ctx context.Context, names, addrs []string, reqs []agent.Request, barriers ...string) ([]*session, error) {
	var ss []*session
	for i := range reqs {
		s, err := open(ctx, names[i], addrs[i], reqs[i])
		if err != nil {
			g := newGroup(c, ctx, ss)
			g.abortNow(barriers...)
			g.close()
			return nil, fmt.Errorf("%w: %w", ErrAborted, err)
		}
		ss = append(ss, s)
	}
	return ss, nil
}

package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckpt/ckpt/pkg/agent"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestParseMember checks the PID@AGENT syntax, and that String gives it
// back.
func TestParseMember(t *testing.T) {
	tests := []struct {
		in      string
		want    Member
		wantErr bool
	}{
		{in: "12@unix:/x", want: Member{Agent: "unix:/x", PID: 12}},
		{in: "12@10.0.0.1:7000", want: Member{Agent: "10.0.0.1:7000", PID: 12}},
		{in: "4194304@[fd00::1]:7000", want: Member{Agent: "[fd00::1]:7000", PID: 4194304}},
		{in: "7@a@b", want: Member{Agent: "a@b", PID: 7}},
		{in: "x@a", wantErr: true},
		{in: "12", wantErr: true},
		{in: "0@a", wantErr: true},
		{in: "-3@a", wantErr: true},
		{in: "12@", wantErr: true},
		{in: "@a", wantErr: true},
		{in: "", wantErr: true},
		{in: " 12@a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMember(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseMember(%q) = %+v, want an error", tt.in, got)
				}
				if !strings.Contains(err.Error(), "PID@AGENT") {
					t.Errorf("error %q does not show the expected syntax", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMember(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseMember(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Errorf("String() = %q, want %q", s, tt.in)
			}
		})
	}
}

// sampleManifest is a manifest with every field set.
func sampleManifest() *Manifest {
	return &Manifest{
		Name:      "job-1",
		Created:   time.Date(2024, 5, 1, 12, 30, 0, 123456789, time.UTC),
		Members:   []Member{{Agent: "unix:/run/a.sock", PID: 100}, {Agent: "10.0.0.2:7000", PID: 101}, {Agent: "10.0.0.3:7000", PID: 100}},
		Parity:    true,
		BlockSize: 1 << 20,
	}
}

// TestManifestSaveLoad saves a manifest over an existing world-readable
// file and loads it back: same content, mode 0600, no temporary file left.
func TestManifestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "job.json")
	if err := os.WriteFile(file, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := sampleManifest()
	if err := m.Save(file); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("saved manifest has mode %v, want 0600", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d files after Save, want only the manifest", len(ents))
	}
	got, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, got); diff != "" {
		t.Fatalf("loaded manifest (-saved +loaded):\n%s", diff)
	}
	for i, want := range []string{"job-1/100", "job-1/101", "job-1/100"} {
		if got.ImageOf(i) != want {
			t.Errorf("ImageOf(%d) = %q, want %q", i, got.ImageOf(i), want)
		}
	}
}

// TestLoadErrors checks that Load refuses what is not a usable manifest.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" means no file
		want    error  // checked with errors.Is if not nil
	}{
		{name: "missing file", want: os.ErrNotExist},
		{name: "not JSON", content: "name: job\n"},
		{name: "truncated JSON", content: `{"name":"job","members":[{"agent":"a","pid":1}]`},
		{name: "wrong type", content: `{"name":"job","members":{"agent":"a"}}`},
		{name: "no name", content: `{"members":[{"agent":"a","pid":1}]}`},
		{name: "no members", content: `{"name":"job"}`},
		{name: "empty members", content: `{"name":"job","members":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "job.json")
			if tt.content != "" {
				if err := os.WriteFile(file, []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			m, err := Load(file)
			if err == nil {
				t.Fatalf("Load: %+v, want an error", m)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Load: %v, want %v", err, tt.want)
			}
		})
	}
}

// TestCheckMembers checks the group rules: no member twice, and with
// parity at least 3 members, each on its own node.
func TestCheckMembers(t *testing.T) {
	a, b, c := "unix:/a", "unix:/b", "10.0.0.3:7000"
	tests := []struct {
		name    string
		members []Member
		parity  bool
		wantErr string // "" for no error
	}{
		{"one member", []Member{{a, 1}}, false, ""},
		{"two members on one node", []Member{{a, 1}, {a, 2}}, false, ""},
		{"same PID on two nodes", []Member{{a, 1}, {b, 1}}, false, ""},
		{"parity on three nodes", []Member{{a, 1}, {b, 1}, {c, 1}}, true, ""},
		{"no members", nil, false, "no members"},
		{"duplicate member", []Member{{a, 1}, {b, 2}, {a, 1}}, false, "given twice"},
		{"duplicate member with parity", []Member{{a, 1}, {b, 2}, {a, 1}}, true, "given twice"},
		{"two members on one node with parity", []Member{{a, 1}, {b, 2}, {a, 3}}, true, "two members"},
		{"parity with two nodes", []Member{{a, 1}, {b, 2}}, true, "at least 3"},
		{"parity with one node", []Member{{a, 1}}, true, "at least 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkMembers(tt.members, tt.parity)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("checkMembers: %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("checkMembers: %v, want an error about %q", err, tt.wantErr)
			}
		})
	}
}

// Markers in a fakeAgent's record of a connection besides request ops.
const (
	// closed: the coordinator closed the connection while the fake waited
	// for its word.
	closed = "<closed>"
)

// fakeAgent serves the agent control protocol on a unix socket without
// doing anything: it walks each operation's barriers (dump: frozen then
// prepared; restore: built), waits at each for the coordinator's decision,
// and records every request it gets. It answers EvError "aborted" to any
// decision but the one that lets it go on, as a real agent does.
type fakeAgent struct {
	name string
	addr string // unix:PATH
	pid  int    // the PID its results report
	// failAt is the barrier (0 first) at which the fake reports EvError
	// instead of the barrier event; -1 for never.
	failAt int
	// silentAt is the barrier at which the fake sends nothing and just
	// waits for the coordinator's next word (or close); -1 for never.
	silentAt int

	mu    sync.Mutex
	conns [][]agent.Request // per connection, in accept order; Op closed marks a close
	wg    sync.WaitGroup    // connection handlers
}

// opBarriers is the sequence of barrier events of each operation and the
// decision that passes each; an operation not listed ends at once.
var opBarriers = map[string][][2]string{
	agent.OpDump:    {{agent.EvFrozen, agent.OpContinue}, {agent.EvPrepared, agent.OpCommit}},
	agent.OpRestore: {{agent.EvBuilt, agent.OpRelease}},
}

// startFake starts a fake agent listening in dir; it stops when the test
// ends.
func startFake(t *testing.T, dir, name string, pid, failAt, silentAt int) *fakeAgent {
	t.Helper()
	path := filepath.Join(dir, name+".sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAgent{name: name, addr: "unix:" + path, pid: pid, failAt: failAt, silentAt: silentAt}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, nil)
			n := len(f.conns) - 1
			f.wg.Add(1)
			f.mu.Unlock()
			go func() {
				defer f.wg.Done()
				defer c.Close()
				f.serve(agent.NewConn(c), n)
			}()
		}
	}()
	return f
}

// record appends r to the record of connection n.
func (f *fakeAgent) record(n int, r agent.Request) {
	f.mu.Lock()
	f.conns[n] = append(f.conns[n], r)
	f.mu.Unlock()
}

// recv reads the coordinator's next request on connection n and records
// it (a close is recorded as Op closed).
func (f *fakeAgent) recv(c *agent.Conn, n int) agent.Request {
	var r agent.Request
	if err := c.Recv(&r); err != nil {
		r = agent.Request{Op: closed}
	}
	f.record(n, r)
	return r
}

// serve runs one operation on connection n.
func (f *fakeAgent) serve(c *agent.Conn, n int) {
	req := f.recv(c, n)
	if req.Op == closed {
		return
	}
	for k, b := range opBarriers[req.Op] {
		event, decision := b[0], b[1]
		switch k {
		case f.failAt:
			c.Send(agent.Event{Event: agent.EvError, Error: fmt.Sprintf("%s: %s failed before %q", f.name, req.Op, event)})
			return
		case f.silentAt:
			if r := f.recv(c, n); r.Op != closed {
				c.Send(agent.Event{Event: agent.EvError, Error: fmt.Sprintf("%s: told %q", f.name, r.Op)})
			}
			return
		}
		c.Send(agent.Event{Event: event})
		r := f.recv(c, n)
		if r.Op == closed {
			return
		}
		if r.Op != decision {
			c.Send(agent.Event{Event: agent.EvError, Error: fmt.Sprintf("%s: told %q after %q: aborted", f.name, r.Op, event)})
			return
		}
	}
	if req.Op == agent.OpRestore {
		c.Send(agent.Event{Event: agent.EvReleased}) // informational
	}
	res, _ := json.Marshal(map[string]any{"pid": f.pid, "agent": f.name, "op": req.Op})
	c.Send(agent.Event{Event: agent.EvOK, Result: res})
}

// ops returns the ops the fake received, one list per connection, once
// every connection handler has ended (which the test waits for: the
// coordinator has closed its connections when its operation returns).
func (f *fakeAgent) ops(t *testing.T) [][]string {
	t.Helper()
	// Every Add was made under f.mu: taking it orders them before the
	// Wait for the race detector (the real order goes through sockets).
	f.mu.Lock()
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatalf("%s: a connection is still open after the operation returned", f.name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]string, len(f.conns))
	for i, c := range f.conns {
		for _, r := range c {
			out[i] = append(out[i], r.Op)
		}
	}
	return out
}

// firstRequests returns the first request of every connection the fake
// accepted.
func (f *fakeAgent) firstRequests() []agent.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []agent.Request
	for _, c := range f.conns {
		if len(c) > 0 {
			out = append(out, c[0])
		}
	}
	return out
}

// fakeDir returns a short temporary directory for unix sockets (whose
// paths are limited to about 100 bytes), removed when the test ends.
func fakeDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "coord")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// fakeSpec says how one fake agent of a test behaves.
type fakeSpec struct {
	failAt, silentAt int
}

var (
	works    = fakeSpec{-1, -1}
	failsAt0 = fakeSpec{0, -1}
	failsAt1 = fakeSpec{1, -1}
	silent   = func(k int) fakeSpec { return fakeSpec{-1, k} }
)

// startFakes starts one fake agent per spec, with PIDs 100, 101, …
func startFakes(t *testing.T, specs []fakeSpec) ([]*fakeAgent, []Member) {
	t.Helper()
	dir := fakeDir(t)
	fakes := make([]*fakeAgent, len(specs))
	members := make([]Member, len(specs))
	for i, s := range specs {
		fakes[i] = startFake(t, dir, fmt.Sprintf("a%d", i), 100+i, s.failAt, s.silentAt)
		members[i] = Member{Agent: fakes[i].addr, PID: 100 + i}
	}
	return fakes, members
}

// TestCheckpoint runs group checkpoints against fake agents: when every
// member gets through both barriers, all are told continue then commit
// and the manifest names their images; when one fails (or stops answering)
// before the commit, every other one that reached a barrier is told
// "abort", the error wraps ErrAborted, and every member's image is removed.
func TestCheckpoint(t *testing.T) {
	const ok, aborted = "ok", "aborted"
	tests := []struct {
		name    string
		specs   []fakeSpec
		kill    bool
		timeout time.Duration
		result  string
		// ops are the requests each fake gets on its dump connection.
		ops [][]string
		// msg must appear in the error.
		msg string
	}{
		{
			name:   "all commit",
			specs:  []fakeSpec{works, works, works},
			result: ok,
			ops:    [][]string{{"dump", "continue", "commit"}, {"dump", "continue", "commit"}, {"dump", "continue", "commit"}},
		},
		{
			name:   "all commit, kill",
			specs:  []fakeSpec{works, works, works, works},
			kill:   true,
			result: ok,
			ops:    [][]string{{"dump", "continue", "commit"}, {"dump", "continue", "commit"}, {"dump", "continue", "commit"}, {"dump", "continue", "commit"}},
		},
		{
			name:   "second fails before frozen",
			specs:  []fakeSpec{works, failsAt0, works},
			result: aborted,
			ops:    [][]string{{"dump", "abort"}, {"dump"}, {"dump", "abort"}},
			msg:    `a1: dump failed before "frozen"`,
		},
		{
			name:   "first fails before prepared",
			specs:  []fakeSpec{failsAt1, works, works},
			result: aborted,
			ops:    [][]string{{"dump", "continue"}, {"dump", "continue", "abort"}, {"dump", "continue", "abort"}},
			msg:    `a0: dump failed before "prepared"`,
		},
		{
			name:   "two fail",
			specs:  []fakeSpec{works, failsAt0, failsAt0, works},
			result: aborted,
			ops:    [][]string{{"dump", "abort"}, {"dump"}, {"dump"}, {"dump", "abort"}},
			msg:    `a2: dump failed before "frozen"`,
		},
		{
			name:    "third never prepared",
			specs:   []fakeSpec{works, works, silent(1)},
			timeout: 300 * time.Millisecond,
			result:  aborted,
			// The silent one timed out: it is told abort (and its connection
			// closes), which aborts a real agent's dump.
			ops: [][]string{{"dump", "continue", "abort"}, {"dump", "continue", "abort"}, {"dump", "continue", "abort"}},
			msg: "no answer in 300ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakes, members := startFakes(t, tt.specs)
			c := &Coordinator{Timeout: cmpOr(tt.timeout, 3*time.Second), Log: t.Logf}
			start := time.Now()
			m, rep, err := c.Checkpoint(context.Background(), "job", members, CheckpointOptions{Kill: tt.kill})
			elapsed := time.Since(start)
			t.Logf("checkpoint took %v: %v", elapsed.Round(time.Millisecond), err)
			if tt.timeout != 0 && elapsed > 5*tt.timeout {
				t.Errorf("checkpoint took %v with a barrier timeout of %v", elapsed, tt.timeout)
			}
			var removed []string // images removed, by member
			for i, f := range fakes {
				conns := f.ops(t)
				if len(conns) == 0 || !slices.Equal(conns[0], tt.ops[i]) {
					t.Errorf("%s got %q on its dump connection, want %q", f.name, conns, tt.ops[i])
				}
				reqs := f.firstRequests()
				if len(reqs) == 0 {
					continue
				}
				if d := reqs[0]; d.Op != agent.OpDump || d.PID != members[i].PID || d.Image != fmt.Sprintf("job/%d", members[i].PID) || d.LeaveRunning == tt.kill {
					t.Errorf("%s: dump request %+v", f.name, d)
				}
				for _, r := range reqs[1:] {
					if r.Op != agent.OpRemove {
						t.Errorf("%s: unexpected request %+v", f.name, r)
					}
					removed = append(removed, r.Image)
				}
			}
			if tt.result == ok {
				if err != nil {
					t.Fatalf("Checkpoint: %v", err)
				}
				if len(removed) != 0 {
					t.Errorf("images removed after a successful checkpoint: %q", removed)
				}
				if m.Name != "job" || !slices.Equal(m.Members, members) || m.Parity {
					t.Errorf("manifest %+v", m)
				}
				for i := range members {
					if want := fmt.Sprintf("job/%d", 100+i); m.ImageOf(i) != want {
						t.Errorf("ImageOf(%d) = %q, want %q", i, m.ImageOf(i), want)
					}
				}
				if len(rep.Members) != len(members) {
					t.Fatalf("report has %d members, want %d", len(rep.Members), len(members))
				}
				for i, r := range rep.Members {
					var res struct {
						PID   int
						Agent string
					}
					if err := json.Unmarshal(r.Result, &res); err != nil || r.Member != members[i] || res.PID != members[i].PID || res.Agent != fakes[i].name {
						t.Errorf("report member %d: %+v (%s), %v", i, r.Member, r.Result, err)
					}
				}
				return
			}
			if !errors.Is(err, ErrAborted) {
				t.Fatalf("Checkpoint: %v, want ErrAborted", err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Checkpoint: %v, want it to say %q", err, tt.msg)
			}
			if m != nil || rep != nil {
				t.Errorf("aborted checkpoint returned manifest %+v, report %+v", m, rep)
			}
			want := []string{"job/100", "job/101", "job/102", "job/103"}[:len(members)]
			slices.Sort(removed)
			if !slices.Equal(removed, want) {
				t.Errorf("images removed after the abort: %q, want %q", removed, want)
			}
		})
	}
}

// cmpOr returns a if it is not zero, else b.
func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// TestCheckpointRefused checks that a group the rules refuse, or with an
// agent nobody listens at, fails without leaving any dump running.
func TestCheckpointRefused(t *testing.T) {
	tests := []struct {
		name  string
		specs []fakeSpec
		// members rewrites the members before the checkpoint.
		members func(t *testing.T, m []Member) []Member
		parity  bool
		// ops are the requests each fake gets, per connection.
		ops [][][]string
	}{
		{
			name:    "member twice",
			specs:   []fakeSpec{works, works},
			members: func(_ *testing.T, m []Member) []Member { return append(m, m[0]) },
			ops:     [][][]string{nil, nil},
		},
		{
			name:   "parity with two nodes",
			specs:  []fakeSpec{works, works},
			parity: true,
			ops:    [][][]string{nil, nil},
		},
		{
			name:  "agent unreachable",
			specs: []fakeSpec{works, works},
			members: func(t *testing.T, m []Member) []Member {
				return append(m, Member{Agent: "unix:" + filepath.Join(fakeDir(t), "none.sock"), PID: 7})
			},
			// The dumps already asked for are dropped (a real agent
			// aborts when the connection closes), and their images removed.
			ops: [][][]string{{{"dump", "abort"}, {"remove"}}, {{"dump", "abort"}, {"remove"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakes, members := startFakes(t, tt.specs)
			if tt.members != nil {
				members = tt.members(t, members)
			}
			c := &Coordinator{Timeout: 3 * time.Second, Log: t.Logf}
			m, _, err := c.Checkpoint(context.Background(), "job", members, CheckpointOptions{Parity: tt.parity})
			if err == nil {
				t.Fatalf("Checkpoint: manifest %+v, want an error", m)
			}
			for i, f := range fakes {
				if got := f.ops(t); !cmp.Equal(got, tt.ops[i], cmpopts.EquateEmpty()) {
					t.Errorf("%s got %q, want %q", f.name, got, tt.ops[i])
				}
			}
		})
	}
}

// TestRestore restores a group from fake agents: all built, then all
// released; or, when one fails (or stops answering) before "built", every
// other one is told "abort" at "built" and the error wraps ErrAborted.
func TestRestore(t *testing.T) {
	tests := []struct {
		name    string
		specs   []fakeSpec
		timeout time.Duration
		ops     [][]string // requests each fake gets
		msg     string     // "" for success, else what the error says
	}{
		{
			name:  "all released",
			specs: []fakeSpec{works, works, works},
			ops:   [][]string{{"restore", "release"}, {"restore", "release"}, {"restore", "release"}},
		},
		{
			name:  "first fails before built",
			specs: []fakeSpec{failsAt0, works, works},
			ops:   [][]string{{"restore"}, {"restore", "abort"}, {"restore", "abort"}},
			msg:   `a0: restore failed before "built"`,
		},
		{
			name:  "last fails before built",
			specs: []fakeSpec{works, works, works, failsAt0},
			ops:   [][]string{{"restore", "abort"}, {"restore", "abort"}, {"restore", "abort"}, {"restore"}},
			msg:   `a3: restore failed before "built"`,
		},
		{
			name:    "second never built",
			specs:   []fakeSpec{works, silent(0), works},
			timeout: 300 * time.Millisecond,
			ops:     [][]string{{"restore", "abort"}, {"restore", "abort"}, {"restore", "abort"}},
			msg:     "no answer in 300ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakes, members := startFakes(t, tt.specs)
			m := &Manifest{Name: "job", Members: members}
			c := &Coordinator{Timeout: cmpOr(tt.timeout, 3*time.Second), Log: t.Logf}
			start := time.Now()
			rep, err := c.Restore(context.Background(), m, "tcp 10.0.0.1:80 -> 10.0.0.2:80\n")
			if elapsed := time.Since(start); tt.timeout != 0 && elapsed > 5*tt.timeout {
				t.Errorf("restore took %v with a barrier timeout of %v", elapsed, tt.timeout)
			}
			for i, f := range fakes {
				conns := f.ops(t)
				if len(conns) != 1 || !slices.Equal(conns[0], tt.ops[i]) {
					t.Errorf("%s got %q, want one connection with %q", f.name, conns, tt.ops[i])
				}
				if reqs := f.firstRequests(); len(reqs) != 1 || reqs[0].Image != m.ImageOf(i) || reqs[0].Rules == "" {
					t.Errorf("%s: restore request %+v, want image %s with the rules", f.name, reqs, m.ImageOf(i))
				}
			}
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				if len(rep.Members) != len(members) {
					t.Fatalf("report has %d members, want %d", len(rep.Members), len(members))
				}
				for i, r := range rep.Members {
					if r.Member != members[i] || !strings.Contains(string(r.Result), fakes[i].name) {
						t.Errorf("report member %d: %+v %s", i, r.Member, r.Result)
					}
				}
				return
			}
			if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Restore: %v, want ErrAborted saying %q", err, tt.msg)
			}
		})
	}
}

// FuzzParseMember: ParseMember never panics, and what it accepts
// round-trips through String.
func FuzzParseMember(f *testing.F) {
	for _, s := range []string{"12@unix:/x", "12@10.0.0.1:7000", "1@[::1]:7", "x@a", "@", "0@a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMember(s)
		if err != nil {
			return
		}
		back, err := ParseMember(m.String())
		if err != nil || back != m {
			t.Fatalf("%q parsed as %+v, which prints as %q and parses back as %+v (%v)", s, m, m.String(), back, err)
		}
	})
}

package image

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckLeaderExited checks the invariants of a process whose leader
// had exited (Process.LeaderExited): another thread runs, the leader's
// record says Z, and its exit code is one the exit system call makes.
func TestCheckLeaderExited(t *testing.T) {
	dead := func(edit func(p *Process)) *Process {
		p := sampleRoot()
		p.LeaderExited, p.LeaderExitCode = true, 5<<8
		p.Threads[0].State = "Z"
		if edit != nil {
			edit(p)
		}
		return p
	}
	for _, c := range []struct {
		name string
		p    *Process
		want string // "" for valid
	}{
		{"pthread_exit", dead(func(p *Process) { p.LeaderExitCode = 0 }), ""},
		{"exit(5)", dead(nil), ""},
		{"no other thread", dead(func(p *Process) { p.Threads = p.Threads[:1] }), "a process whose leader exited with 1 threads"},
		{"leader not a zombie", dead(func(p *Process) { p.Threads[0].State = "S" }), `the leader in state "S"`},
		{"stopped", dead(func(p *Process) { p.Misc.Stopped = true }), ""},
		{"inside vfork", dead(func(p *Process) { p.VforkOf = 1 }), "inside vfork()"},
		{"exit code of a live leader", func() *Process { p := sampleRoot(); p.LeaderExitCode = 5 << 8; return p }(), "a leader exit code 0x500 for a leader that has not exited"},
		{"exit code malformed", dead(func(p *Process) { p.LeaderExitCode = 5 }), "leader exit code 0x5: not one the exit system call makes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkProcess(c.p)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("checkProcess: %v, want valid", err)
			case c.want != "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("checkProcess: %v, want ErrInvalid saying %q", err, c.want)
			}
		})
	}
}

package fdkind

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Table() {
		if seen[string(k.Name)] {
			t.Errorf("kind %q twice", k.Name)
		}
		seen[string(k.Name)] = true
		if k.Match == nil || k.Describe == nil {
			t.Errorf("kind %q: no Match or Describe", k.Name)
		}
		if k.Open != nil && k.Show == nil {
			t.Errorf("kind %q: restorable but no Show", k.Name)
		}
		if _, err := Lookup(k.Name); err != nil {
			t.Errorf("Lookup(%q): %v", k.Name, err)
		}
	}
}

// TestRefused: the kinds ckpt cannot restore are refused by name.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		link, want string
	}{
		{"anon_inode:[io_uring]", "io_uring instance: cannot be restored"},
		{"anon_inode:bpf-map", "bpf object"},
		{"anon_inode:bpf-prog", "bpf object"},
		{"anon_inode:bpf_link", "bpf object"},
		{"anon_inode:[perf_event]", "perf_event: cannot be restored"},
		{"anon_inode:[userfaultfd]", "userfaultfd: cannot be restored"},
		{"anon_inode:[something-new]", "anonymous inode [something-new]"},
	} {
		s := &Source{Link: tc.link}
		_, err := Describe(nil, s, -1)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q (unsupported)", tc.link, err, tc.want)
		}
	}
	// A pty master is described through ckpt's copy of it: without one it
	// is refused.
	s := &Source{Link: "/dev/ptmx", Stat: unix.Stat_t{Mode: unix.S_IFCHR | 0o666, Rdev: unix.Mkdev(5, 2)}}
	if _, err := Describe(nil, s, -1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ptmx: %v", err)
	}
}

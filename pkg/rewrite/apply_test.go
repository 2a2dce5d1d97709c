package rewrite

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func mustParse(t *testing.T, text string) *Rules {
	t.Helper()
	rs, err := Parse(strings.NewReader(text), "test.rules")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return rs
}

const applyRules = `
10.0.0.5:22     10.0.0.5:22     # line 2: exception, keep ssh
10.0.0.5        10.0.0.6        # line 3: every other port
10.0.0.1:7000   10.0.0.2:7100   # line 4: host and port
10.0.0.1        10.0.0.3        # line 5: rest of 10.0.0.1
fd00::1         fd00::2         # line 6
[fd00::7]:80    [fd00::8]:8080  # line 7
fe80::1         fe80::2         # line 8
fe80::9         fd00::9         # line 9
0.0.0.0         10.0.0.42       # line 10
192.0.2.1       192.0.2.2       # line 11: never used below
`

func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		matched bool
	}{
		{"port rule before address rule wins", "10.0.0.5:22", "10.0.0.5:22", true},
		{"address rule keeps port", "10.0.0.5:80", "10.0.0.6:80", true},
		{"port rule rewrites port", "10.0.0.1:7000", "10.0.0.2:7100", true},
		{"address rule after port rule", "10.0.0.1:7001", "10.0.0.3:7001", true},
		{"address rule with port 0", "10.0.0.1:0", "10.0.0.3:0", true},
		{"ipv6 address rule", "[fd00::1]:443", "[fd00::2]:443", true},
		{"ipv6 port rule", "[fd00::7]:80", "[fd00::8]:8080", true},
		{"ipv6 port rule other port", "[fd00::7]:81", "[fd00::7]:81", false},
		{"no match ipv4", "10.9.9.9:80", "10.9.9.9:80", false},
		{"no match ipv6", "[fd00::99]:80", "[fd00::99]:80", false},
		{"ipv4 rule does not match ipv6", "[::a00:1]:80", "[::a00:1]:80", false},
		{"mapped endpoint matched by ipv4 rule stays mapped", "[::ffff:10.0.0.1]:7000", "[::ffff:10.0.0.2]:7100", true},
		{"mapped endpoint address rule", "[::ffff:10.0.0.5]:80", "[::ffff:10.0.0.6]:80", true},
		{"mapped endpoint no match", "[::ffff:10.9.9.9]:80", "[::ffff:10.9.9.9]:80", false},
		{"zone ignored for matching, kept on link-local result", "[fe80::1%eth0]:80", "[fe80::2%eth0]:80", true},
		{"zone dropped on global result", "[fe80::9%eth0]:80", "[fd00::9]:80", true},
		{"zone on global endpoint ignored", "[fd00::1%3]:80", "[fd00::2]:80", true},
		{"unspecified address", "0.0.0.0:80", "10.0.0.42:80", true},
		{"ipv6 unspecified not matched by ipv4 rule", "[::]:80", "[::]:80", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustParse(t, applyRules)
			got, ok := rs.Apply(ap(tt.in))
			if got != ap(tt.want) || ok != tt.matched {
				t.Errorf("Apply(%s) = %s, %v; want %s, %v", tt.in, got, ok, tt.want, tt.matched)
			}
			if ok && got.Addr().Is4In6() != ap(tt.in).Addr().Is4In6() {
				t.Errorf("Apply(%s) changed the family to %s", tt.in, got)
			}
		})
	}
}

func TestApplyInvalid(t *testing.T) {
	rs := mustParse(t, "0.0.0.0 10.0.0.1\n:: fd00::1\n")
	if got, ok := rs.Apply(netip.AddrPort{}); ok || got != (netip.AddrPort{}) {
		t.Errorf("Apply(zero) = %v, %v", got, ok)
	}
	if n := len(rs.Unused()); n != 2 {
		t.Errorf("zero endpoint marked a rule used: %d unused", n)
	}
}

func TestApplyFirstMatchWins(t *testing.T) {
	// Address-wide rule after a port rule: the port rule matches first.
	rs := mustParse(t, "10.0.0.1:80 10.0.0.2:81\n10.0.0.1 10.0.0.3\n")
	if got, _ := rs.Apply(ap("10.0.0.1:80")); got != ap("10.0.0.2:81") {
		t.Errorf("got %s", got)
	}
	// Rules do not chain: A->B then B->C leaves A at B.
	rs = mustParse(t, "10.0.0.1 10.0.0.2\n10.0.0.2 10.0.0.3\n")
	if got, _ := rs.Apply(ap("10.0.0.1:5")); got != ap("10.0.0.2:5") {
		t.Errorf("chained: got %s", got)
	}
	// Swap: A->B and B->A are applied once each.
	rs = mustParse(t, "10.0.0.1 10.0.0.2\n10.0.0.2 10.0.0.1\n")
	l, r := rs.ApplyPair(ap("10.0.0.1:5"), ap("10.0.0.2:6"))
	if l != ap("10.0.0.2:5") || r != ap("10.0.0.1:6") {
		t.Errorf("swap: got %s %s", l, r)
	}
}

func TestApplyPair(t *testing.T) {
	rs := mustParse(t, "10.0.0.1 10.0.0.2\n10.0.0.9:80 10.0.0.8:8080\n0.0.0.0 10.0.0.42\n:: fd00::42\n")
	tests := []struct {
		name                  string
		local, remote         netip.AddrPort
		wantLocal, wantRemote netip.AddrPort
	}{
		{"both", ap("10.0.0.1:4000"), ap("10.0.0.9:80"), ap("10.0.0.2:4000"), ap("10.0.0.8:8080")},
		{"local only", ap("10.0.0.1:4000"), ap("10.7.7.7:80"), ap("10.0.0.2:4000"), ap("10.7.7.7:80")},
		{"remote only", ap("10.7.7.7:4000"), ap("10.0.0.1:80"), ap("10.7.7.7:4000"), ap("10.0.0.2:80")},
		{"listener: no remote", ap("0.0.0.0:80"), ap("0.0.0.0:0"), ap("10.0.0.42:80"), ap("0.0.0.0:0")},
		{"ipv6 listener: no remote", ap("[::]:80"), ap("[::]:0"), ap("[fd00::42]:80"), ap("[::]:0")},
		{"unbound socket", ap("0.0.0.0:0"), ap("0.0.0.0:0"), ap("0.0.0.0:0"), ap("0.0.0.0:0")},
		{"zero remote", ap("10.0.0.1:1"), netip.AddrPort{}, ap("10.0.0.2:1"), netip.AddrPort{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, r := rs.ApplyPair(tt.local, tt.remote)
			if l != tt.wantLocal || r != tt.wantRemote {
				t.Errorf("ApplyPair(%s, %s) = %s, %s; want %s, %s", tt.local, tt.remote, l, r, tt.wantLocal, tt.wantRemote)
			}
		})
	}
}

func TestUnused(t *testing.T) {
	rs := mustParse(t, applyRules)
	lines := func(rules []Rule) []int {
		var out []int
		for _, r := range rules {
			out = append(out, r.Line)
		}
		return out
	}
	if got, want := lines(rs.Unused()), []int{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !reflect.DeepEqual(got, want) {
		t.Fatalf("fresh Unused lines = %v, want %v", got, want)
	}
	rs.Apply(ap("10.0.0.5:22"))
	rs.Apply(ap("10.0.0.1:7001"))
	rs.Apply(ap("[::ffff:10.0.0.5]:80"))
	rs.Apply(ap("[fd00::7]:81")) // matches nothing
	rs.ApplyPair(ap("[fe80::1%eth0]:1"), ap("[::]:0"))
	if got, want := lines(rs.Unused()), []int{4, 6, 7, 9, 10, 11}; !reflect.DeepEqual(got, want) {
		t.Errorf("Unused lines = %v, want %v", got, want)
	}
	u := rs.Unused()
	if got, want := u[len(u)-1].String(), "192.0.2.1 192.0.2.2"; got != want {
		t.Errorf("last unused = %q, want %q", got, want)
	}
	// The returned slice is a copy.
	u[0].Line = 999
	if rs.Unused()[0].Line != 4 {
		t.Errorf("Unused returned internal storage")
	}

	all := rs.All()
	all[0].Line = 999
	if rs.All()[0].Line != 2 {
		t.Errorf("All returned internal storage")
	}

	if got := mustParse(t, "").Unused(); len(got) != 0 {
		t.Errorf("empty rules: Unused = %v", got)
	}
}

func TestNilRules(t *testing.T) {
	var rs *Rules
	ep := ap("10.0.0.1:80")
	if got, ok := rs.Apply(ep); got != ep || ok {
		t.Errorf("nil Apply = %v, %v", got, ok)
	}
	if l, r := rs.ApplyPair(ep, ep); l != ep || r != ep {
		t.Errorf("nil ApplyPair = %v, %v", l, r)
	}
	if rs.Unused() != nil || rs.All() != nil || rs.Len() != 0 || rs.Name() != "" {
		t.Errorf("nil accessors not empty")
	}
}

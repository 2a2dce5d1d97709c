package rewrite

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that a failure is always a
// *SyntaxError, and that a successful parse satisfies the documented
// invariants and survives printing with Rule.String and parsing again.
// Seeds are in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add("10.0.0.1 10.0.0.2\n")
	f.Add("[fd00::1]:80 [fd00::2]:8080 # c\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		rs, err := Parse(strings.NewReader(in), "fuzz")
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *SyntaxError", err, err)
			}
			if se.Line < 1 || se.Err == nil || se.File != "fuzz" || rs != nil {
				t.Fatalf("bad SyntaxError %#v, rules %v", se, rs)
			}
			_ = err.Error()
			return
		}

		rules := rs.All()
		var b strings.Builder
		prev := 0
		for _, r := range rules {
			checkRule(t, r)
			if r.Line <= prev {
				t.Fatalf("rule %v: line %d after line %d", r, r.Line, prev)
			}
			prev = r.Line
			b.WriteString(r.String())
			b.WriteByte('\n')
		}

		again, err := Parse(strings.NewReader(b.String()), "printed")
		if err != nil {
			t.Fatalf("reparsing printed rules %q: %v", b.String(), err)
		}
		got := again.All()
		if len(got) != len(rules) {
			t.Fatalf("reparse gave %d rules, want %d", len(got), len(rules))
		}
		for i := range rules {
			if got[i].From != rules[i].From || got[i].To != rules[i].To || got[i].Line != i+1 {
				t.Fatalf("rule %d: reparsed %v (line %d), want %v", i, got[i], got[i].Line, rules[i])
			}
		}

		// Every rule's own FROM is matched (perhaps by an earlier rule),
		// and the result keeps the endpoint's family.
		for _, r := range rules {
			ep := r.From
			if r.AddrOnly() {
				ep = netip.AddrPortFrom(ep.Addr(), 4242) // any port
			}
			out, ok := rs.Apply(ep)
			if !ok || out.Addr().Is4() != ep.Addr().Is4() || !out.IsValid() {
				t.Fatalf("Apply(%v) = %v, %v", ep, out, ok)
			}
		}
		if len(rs.Unused()) > len(rules) {
			t.Fatalf("more unused rules than rules")
		}
	})
}

// checkRule checks the invariants documented on Rule.
func checkRule(t *testing.T, r Rule) {
	t.Helper()
	from, to := r.From.Addr(), r.To.Addr()
	switch {
	case !from.IsValid() || !to.IsValid():
		t.Fatalf("rule %v: invalid address", r)
	case from.Is4() != to.Is4():
		t.Fatalf("rule %v: mixed families", r)
	case from.Zone() != "" || to.Zone() != "":
		t.Fatalf("rule %v: zone", r)
	case from.Is4In6() || to.Is4In6():
		t.Fatalf("rule %v: IPv4-mapped address", r)
	case (r.From.Port() == 0) != (r.To.Port() == 0):
		t.Fatalf("rule %v: mixed address-only and port", r)
	}
}

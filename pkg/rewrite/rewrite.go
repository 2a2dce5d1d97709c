package rewrite

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// EnvVar is the environment variable naming a rules file, used when no
// --rules flag is given. See [LoadFlagOrEnv].
const EnvVar = "CKPT_REWRITE_RULES"

// maxLine is the longest line Parse accepts, in bytes.
const maxLine = 64 * 1024

// Rule is one line of a rules file: endpoints equal to From are rewritten
// to To.
//
// A port of 0 means the side is a bare address: a rule with From.Port() == 0
// matches every port of From.Addr() and keeps the port, and then To.Port()
// is 0 as well. Otherwise both ports are non-zero. From and To are of the
// same address family, carry no zone and are never IPv4-mapped; Parse
// guarantees all this.
type Rule struct {
	From netip.AddrPort // endpoint (or bare address, port 0) to match
	To   netip.AddrPort // replacement (or bare address, port 0)
	Line int            // 1-based line of the rule in its file
}

// AddrOnly reports whether r is an address-only rule, one that matches every
// port of its From address and keeps the port.
func (r Rule) AddrOnly() bool { return r.From.Port() == 0 }

// String returns r in rules file syntax, such as "10.0.0.1 10.0.0.2" or
// "[fd00::1]:80 [fd00::2]:8080". Parsing it gives back r (except Line).
func (r Rule) String() string {
	return formatSide(r.From) + " " + formatSide(r.To)
}

func formatSide(ap netip.AddrPort) string {
	if ap.Port() == 0 {
		return ap.Addr().String()
	}
	return ap.String()
}

// matches reports whether r applies to an endpoint with address addr (already
// stripped of its zone and unmapped) and port.
func (r Rule) matches(addr netip.Addr, port uint16) bool {
	return r.From.Addr() == addr && (r.From.Port() == 0 || r.From.Port() == port)
}

// Rules is a parsed rules file. Create one with [Parse] or [Load].
//
// Apply and ApplyPair record which rules matched, so a Rules must be used by
// one goroutine at a time. A nil *Rules is valid: it has no rules and
// rewrites nothing.
type Rules struct {
	name  string
	rules []Rule
	used  []bool
}

// Name returns the file name given to Parse or Load.
func (r *Rules) Name() string {
	if r == nil {
		return ""
	}
	return r.name
}

// Len returns the number of rules.
func (r *Rules) Len() int {
	if r == nil {
		return 0
	}
	return len(r.rules)
}

// All returns a copy of the rules, in file order.
func (r *Rules) All() []Rule {
	if r == nil {
		return nil
	}
	return append([]Rule(nil), r.rules...)
}

// Apply rewrites ep by the first rule that matches it, and reports whether
// one did; if none did, it returns ep unchanged. It records the match for
// [Rules.Unused].
//
// An IPv4-mapped IPv6 endpoint (::ffff:a.b.c.d) is matched by the IPv4 rules
// and rewritten to the mapped form of the new IPv4 address. The zone of ep
// is ignored when matching and kept only if the new address is link-local.
// An invalid (zero) ep never matches.
func (r *Rules) Apply(ep netip.AddrPort) (netip.AddrPort, bool) {
	if r == nil || !ep.Addr().IsValid() {
		return ep, false
	}
	zone := ep.Addr().Zone()
	addr := ep.Addr().WithZone("")
	mapped := addr.Is4In6()
	addr = addr.Unmap()
	for i := range r.rules {
		rule := r.rules[i]
		if !rule.matches(addr, ep.Port()) {
			continue
		}
		r.used[i] = true
		to := rule.To.Addr()
		if mapped {
			to = netip.AddrFrom16(to.As16())
		} else if zone != "" && needsZone(to) {
			to = to.WithZone(zone)
		}
		port := ep.Port()
		if !rule.AddrOnly() {
			port = rule.To.Port()
		}
		return netip.AddrPortFrom(to, port), true
	}
	return ep, false
}

// needsZone reports whether a zone is meaningful on a.
func needsZone(a netip.Addr) bool {
	return a.Is6() && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast())
}

// ApplyPair applies the rules to both endpoints of a socket, as [Rules.Apply]
// does, and returns the results. An absent endpoint, one that is invalid
// (zero) or has an unspecified address (0.0.0.0 or ::) and port 0, such as
// the remote side of a listening socket, is returned unchanged and matches
// no rule.
func (r *Rules) ApplyPair(local, remote netip.AddrPort) (newLocal, newRemote netip.AddrPort) {
	return r.applyPresent(local), r.applyPresent(remote)
}

func (r *Rules) applyPresent(ep netip.AddrPort) netip.AddrPort {
	if !ep.Addr().IsValid() || (ep.Addr().IsUnspecified() && ep.Port() == 0) {
		return ep
	}
	ep, _ = r.Apply(ep)
	return ep
}

// Unused returns, in file order, the rules that have matched nothing in any
// call to Apply or ApplyPair so far. ckpt-redo prints them as warnings after
// a restore, since an unused rule usually means a typo.
func (r *Rules) Unused() []Rule {
	if r == nil {
		return nil
	}
	var out []Rule
	for i, u := range r.used {
		if !u {
			out = append(out, r.rules[i])
		}
	}
	return out
}

// Load reads and parses the rules file at path, using path as the file name
// in errors.
func Load(path string) (*Rules, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, path)
}

// LoadFlagOrEnv loads the rules file that ckpt-redo should use: flagPath (the
// value of --rules) if it is not empty, otherwise the file named by the
// environment variable [EnvVar] if that is set and not empty. If neither
// names a file, it returns a nil *Rules, which rewrites nothing, and a nil
// error.
func LoadFlagOrEnv(flagPath string) (*Rules, error) {
	path := flagPath
	if path == "" {
		path = os.Getenv(EnvVar)
	}
	if path == "" {
		return nil, nil
	}
	return Load(path)
}

// Parse reads a rules file from rd; name is used in errors (it may be
// empty). The file syntax is described in the package documentation.
// Invalid content yields a [*SyntaxError] for the first bad line; a read
// error is returned wrapped, with name.
func Parse(rd io.Reader, name string) (*Rules, error) {
	rs := &Rules{name: name}
	seen := make(map[netip.AddrPort]int) // From -> line
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			text = strings.TrimPrefix(text, "\uFEFF")
		}
		rule, ok, err := parseLine(text)
		if err != nil {
			err.File, err.Line = name, line
			return nil, err
		}
		if !ok {
			continue
		}
		rule.Line = line
		if first, dup := seen[rule.From]; dup {
			return nil, &SyntaxError{File: name, Line: line, Text: formatSide(rule.From),
				Err: fmt.Errorf("%w, first given on line %d", ErrDuplicate, first)}
		}
		if !rule.AddrOnly() {
			if wide, ok := seen[netip.AddrPortFrom(rule.From.Addr(), 0)]; ok {
				return nil, &SyntaxError{File: name, Line: line, Text: formatSide(rule.From),
					Err: fmt.Errorf("%w: line %d already rewrites every port of %s", ErrShadowed, wide, rule.From.Addr())}
			}
		}
		seen[rule.From] = line
		rs.rules = append(rs.rules, rule)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &SyntaxError{File: name, Line: line + 1,
				Err: fmt.Errorf("%w (limit %d bytes)", ErrLineTooLong, maxLine)}
		}
		if name != "" {
			return nil, fmt.Errorf("rewrite: reading %s: %w", name, err)
		}
		return nil, fmt.Errorf("rewrite: reading rules: %w", err)
	}
	rs.used = make([]bool, len(rs.rules))
	return rs, nil
}

// isSpace reports whether c separates fields. Only ASCII white space does,
// so that an exotic Unicode space is reported rather than silently accepted.
func isSpace(c rune) bool {
	switch c {
	case ' ', '\t', '\r', '\v', '\f':
		return true
	}
	return false
}

// parseLine parses one line. ok is false for a blank or comment-only line.
// A returned error lacks File and Line.
func parseLine(text string) (rule Rule, ok bool, serr *SyntaxError) {
	if i := strings.IndexByte(text, '#'); i >= 0 {
		text = text[:i]
	}
	fields := strings.FieldsFunc(text, isSpace)
	switch len(fields) {
	case 0:
		return Rule{}, false, nil
	case 1:
		return Rule{}, false, &SyntaxError{Text: fields[0], Err: fmt.Errorf("%w: TO is missing", ErrFields)}
	case 2:
	default:
		return Rule{}, false, &SyntaxError{Text: strings.Join(fields, " "),
			Err: fmt.Errorf("%w: %d fields", ErrFields, len(fields))}
	}
	from, err := parseSide(fields[0])
	if err != nil {
		return Rule{}, false, &SyntaxError{Text: fields[0], Err: err}
	}
	to, err := parseSide(fields[1])
	if err != nil {
		return Rule{}, false, &SyntaxError{Text: fields[1], Err: err}
	}
	whole := fields[0] + " " + fields[1]
	if (from.Port() == 0) != (to.Port() == 0) {
		return Rule{}, false, &SyntaxError{Text: whole, Err: ErrKind}
	}
	if from.Addr().Is4() != to.Addr().Is4() {
		return Rule{}, false, &SyntaxError{Text: whole, Err: ErrFamily}
	}
	return Rule{From: from, To: to}, true, nil
}

// parseSide parses one side of a rule: ADDR, IPv4:PORT or [IPv6]:PORT.
// A bare address is returned with port 0.
func parseSide(s string) (netip.AddrPort, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.AddrPort{}, fmt.Errorf("%w: missing ']'", ErrAddress)
		}
		rest := s[end+1:]
		if rest == "" {
			return netip.AddrPort{}, fmt.Errorf("%w: none after ']' (to mean every port, write the IPv6 address without brackets)", ErrPort)
		}
		if rest[0] != ':' {
			return netip.AddrPort{}, fmt.Errorf("%w: expected ':' after ']'", ErrAddress)
		}
		addr, err := parseAddr(s[1:end])
		if err != nil {
			return netip.AddrPort{}, err
		}
		if !addr.Is6() {
			return netip.AddrPort{}, fmt.Errorf("%w: brackets are only for IPv6 addresses", ErrAddress)
		}
		port, err := parsePort(rest[1:])
		if err != nil {
			return netip.AddrPort{}, err
		}
		return netip.AddrPortFrom(addr, port), nil
	}
	if strings.Count(s, ":") == 1 {
		// IPv4:PORT; an IPv6 address has at least two colons.
		host, ps, _ := strings.Cut(s, ":")
		addr, err := parseAddr(host)
		if err != nil {
			return netip.AddrPort{}, err
		}
		port, err := parsePort(ps)
		if err != nil {
			return netip.AddrPort{}, err
		}
		return netip.AddrPortFrom(addr, port), nil
	}
	addr, err := parseAddr(s)
	if err != nil {
		if i := strings.LastIndexByte(s, ':'); i > 0 && errors.Is(err, ErrAddress) {
			if a, e := netip.ParseAddr(s[:i]); e == nil && a.Is6() {
				return netip.AddrPort{}, fmt.Errorf("%w (an IPv6 address with a port must be bracketed: [ADDR]:PORT)", err)
			}
		}
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(addr, 0), nil
}

// parseAddr parses an IPv4 or IPv6 address without zone, refusing
// IPv4-mapped IPv6 addresses.
func parseAddr(s string) (netip.Addr, error) {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		if strings.Contains(s, "%") {
			if _, e := netip.ParseAddr(s[:strings.IndexByte(s, '%')]); e == nil {
				return netip.Addr{}, ErrZone
			}
		}
		return netip.Addr{}, ErrAddress
	}
	if addr.Zone() != "" {
		return netip.Addr{}, ErrZone
	}
	if addr.Is4In6() {
		return netip.Addr{}, ErrMapped
	}
	return addr, nil
}

// parsePort parses a decimal port in 1-65535.
func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: missing", ErrPort)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, ErrPort
		}
	}
	s = strings.TrimLeft(s, "0")
	if s == "" {
		return 0, ErrPortZero
	}
	if len(s) > 5 {
		return 0, ErrPortRange
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, ErrPortRange
	}
	return uint16(n), nil
}

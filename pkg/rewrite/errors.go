package rewrite

import (
	"errors"
	"fmt"
)

// Errors wrapped by [SyntaxError.Err]. Test for them with [errors.Is]; some
// are wrapped with extra detail, such as the line of an earlier rule.
var (
	// ErrFields: a rule line does not have exactly two fields, FROM and TO.
	ErrFields = errors.New(`expected "FROM TO"`)
	// ErrAddress: a side is not a valid IP address, or is malformed
	// around its brackets.
	ErrAddress = errors.New("invalid IP address")
	// ErrPort: a port is missing or not a decimal number.
	ErrPort = errors.New("invalid port")
	// ErrPortRange: a port is larger than 65535.
	ErrPortRange = errors.New("port out of range")
	// ErrPortZero: a port is 0, which no endpoint worth rewriting has.
	ErrPortZero = errors.New("port 0 not allowed (use the bare address to mean every port)")
	// ErrZone: an IPv6 address carries a zone ("%eth0").
	ErrZone = errors.New("IPv6 zone not allowed in rules")
	// ErrMapped: an address is an IPv4-mapped IPv6 address.
	ErrMapped = errors.New("IPv4-mapped IPv6 address not allowed (write the IPv4 address; it also matches mapped endpoints)")
	// ErrKind: one side has a port and the other does not.
	ErrKind = errors.New("FROM and TO must both have a port or both be bare addresses")
	// ErrFamily: one side is IPv4 and the other IPv6.
	ErrFamily = errors.New("FROM and TO must be the same address family (a socket's family cannot change on restore)")
	// ErrDuplicate: the FROM of a rule already appeared on an earlier line.
	ErrDuplicate = errors.New("duplicate FROM")
	// ErrShadowed: a port-specific rule follows an address-only rule for
	// the same address, which always matches first.
	ErrShadowed = errors.New("rule can never match")
	// ErrLineTooLong: a line is longer than the parser accepts.
	ErrLineTooLong = errors.New("line too long")
)

// SyntaxError reports an invalid line in a rules file. Its message has the
// form
//
//	rules.txt:7: "10.0.0.1:99999": port out of range
//
// Err wraps one of the Err* variables of this package, so callers can use
// [errors.Is] on the error returned by [Parse] or [Load], and [errors.As]
// to get at the SyntaxError itself.
type SyntaxError struct {
	File string // file name given to Parse or Load; may be empty
	Line int    // 1-based line number
	Text string // the offending text: one side of a rule, or the whole rule
	Err  error  // what is wrong; wraps one of the Err* variables
}

// Error returns "FILE:LINE: "TEXT": REASON", leaving out FILE when it is
// empty and TEXT when there is none.
func (e *SyntaxError) Error() string {
	where := fmt.Sprintf("line %d", e.Line)
	if e.File != "" {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Text == "" {
		return fmt.Sprintf("%s: %v", where, e.Err)
	}
	return fmt.Sprintf("%s: %q: %v", where, e.Text, e.Err)
}

// Unwrap returns e.Err.
func (e *SyntaxError) Unwrap() error { return e.Err }

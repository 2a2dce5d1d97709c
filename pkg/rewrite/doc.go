// Package rewrite implements endpoint-rewrite rules, applied at restore time
// to move the TCP and UDP endpoints of a checkpointed process to new
// addresses, for example when a process is migrated to another host (as
// GridMPI's libckpt does).
//
// Rules are read from a file given to "ckpt-redo --rules FILE" or named by
// the environment variable CKPT_REWRITE_RULES (see [EnvVar], [Load] and
// [LoadFlagOrEnv]).
//
// # File syntax
//
// The file is UTF-8 (or ASCII) text with one rule per line:
//
//	FROM TO
//
// FROM and TO are separated by spaces or tabs. Each side is one of
//
//	10.0.0.1             an IPv4 address: every port of that address
//	fd00::1              an IPv6 address: every port of that address
//	10.0.0.1:8080        an IPv4 address and a port
//	[fd00::1]:8080       an IPv6 address and a port (brackets are required)
//
// A "#" starts a comment that runs to the end of the line, so it may take a
// whole line or follow a rule. Blank lines are ignored, and so are LF or CRLF
// line endings and a leading UTF-8 byte order mark. An unbracketed IPv6
// address is always an address on its own: "::1:80" is the address ::1:80,
// not port 80 of ::1.
//
// Example:
//
//	# Node n17 was replaced by n42; everything on it moves.
//	10.1.0.17          10.1.0.42
//	fd00:1::17         fd00:1::42
//
//	# The coordinator moves host and port.
//	10.1.0.1:7000      10.1.0.2:7100   # was on the head node
//	[fd00:1::1]:7000   [fd00:1::2]:7100
//
//	# Keep ssh where it was, but move every other port of 10.1.0.5.
//	10.1.0.5:22        10.1.0.5:22
//	10.1.0.5           10.1.0.6
//
// # Meaning
//
// Each endpoint (local or remote address of a socket) is tested against the
// rules in file order; the first rule that matches rewrites it and no further
// rules are tried, so rules do not chain (with "A B" and "B C", A becomes B,
// not C). An address-only FROM matches every port of that address and its TO
// must also be address-only: the port is kept. A FROM with a port matches
// only that port and its TO must also have a port, which replaces it.
// A rule whose TO equals its FROM leaves matching endpoints as they are; put
// it before a broader rule to make an exception, as in the ssh example.
//
// # Checks
//
// [Parse] rejects, with a [*SyntaxError] naming the file, the line and the
// offending text:
//
//   - a line that does not have exactly two fields;
//   - a malformed address or port, or a port outside 1-65535 (port 0 is
//     refused: use the bare address to mean every port);
//   - an address-only side paired with a side that has a port;
//   - an IPv4 side paired with an IPv6 side: a socket's address family
//     cannot change on restore, so such a rule could never be applied;
//   - an IPv6 zone ("fe80::1%eth0"): rules are host-independent and zones
//     name local interfaces;
//   - an IPv4-mapped IPv6 address ("::ffff:10.0.0.1"): write the IPv4
//     address instead, which also matches mapped endpoints (see below);
//   - a FROM that already appeared on an earlier line, and a port-specific
//     FROM that follows an address-only rule for the same address: first
//     match wins, so such a rule could never match and is surely a mistake.
//
// Parse stops at the first error.
//
// # IPv4-mapped endpoints and zones
//
// A dual-stack (AF_INET6) socket talking IPv4 has endpoints such as
// ::ffff:10.0.0.1. [Rules.Apply] matches such an endpoint against the IPv4
// rules as if it were 10.0.0.1, and returns the result in mapped form
// (::ffff:10.0.0.2), so the socket keeps its family. IPv6 rules never
// match mapped endpoints.
//
// The zone of an endpoint (fe80::1%eth0) is ignored when matching. It is kept
// on the result only when the new address is link-local (or interface- or
// link-local multicast), where a zone is meaningful; otherwise it is dropped.
//
// # Concurrency
//
// [Rules.Apply] records which rules matched, for [Rules.Unused]. A [Rules]
// value is therefore not safe for concurrent use: use it from one goroutine
// at a time, or guard it with a mutex. The package has no mutable global
// state.
package rewrite

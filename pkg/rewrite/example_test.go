package rewrite_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ckpt/ckpt/pkg/rewrite"
)

func Example() {
	const file = `
# n17 was replaced by n42
10.1.0.17          10.1.0.42
10.1.0.1:7000      10.1.0.2:7100   # coordinator
[fd00:1::1]:7000   [fd00:1::2]:7100
`
	rules, err := rewrite.Parse(strings.NewReader(file), "rules.txt")
	if err != nil {
		fmt.Println(err)
		return
	}
	local, remote := rules.ApplyPair(
		netip.MustParseAddrPort("10.1.0.17:40000"),
		netip.MustParseAddrPort("10.1.0.1:7000"),
	)
	fmt.Println(local, remote)

	// A dual-stack socket's IPv4-mapped endpoint stays mapped.
	ep, ok := rules.Apply(netip.MustParseAddrPort("[::ffff:10.1.0.17]:22"))
	fmt.Println(ep, ok)

	for _, r := range rules.Unused() {
		fmt.Printf("warning: rules.txt:%d: rule %q matched no socket\n", r.Line, r)
	}
	// Output:
	// 10.1.0.42:40000 10.1.0.2:7100
	// [::ffff:10.1.0.42]:22 true
	// warning: rules.txt:5: rule "[fd00:1::1]:7000 [fd00:1::2]:7100" matched no socket
}

func ExampleSyntaxError() {
	_, err := rewrite.Parse(strings.NewReader("10.0.0.1 10.0.0.2\n10.0.0.1:99999 10.0.0.2:1\n"), "rules.txt")
	fmt.Println(err)

	var se *rewrite.SyntaxError
	if errors.As(err, &se) {
		fmt.Println(se.Line, se.Text, errors.Is(err, rewrite.ErrPortRange))
	}
	// Output:
	// rules.txt:2: "10.0.0.1:99999": port out of range
	// 2 10.0.0.1:99999 true
}

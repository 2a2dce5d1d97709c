package sockets

import (
	"fmt"
	"os"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
)

// dropRebuildSYNs drops, until the test ends, the packets of the sockets
// a restore connects for real (marked DropMark: the SYN and the answer to
// the forged SYN-ACK), as every network lock does (pkg/netlock, which
// this package's own tests cannot import). Without it the SYN reaches the
// live peer, whose challenge ACK resets the rebuild.
func dropRebuildSYNs(t testing.TB) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tab := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: fmt.Sprintf("ckpt-test-syn-%d-%p", os.Getpid(), t)})
	policy := nftables.ChainPolicyAccept
	out := c.AddChain(&nftables.Chain{Name: "out", Table: tab, Hooknum: nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityRef(-300), Type: nftables.ChainTypeFilter, Policy: &policy})
	c.AddRule(&nftables.Rule{Table: tab, Chain: out, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(DropMark)},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("nftables: %v", err)
	}
	t.Cleanup(func() {
		c.DelTable(tab)
		c.Flush()
	})
}

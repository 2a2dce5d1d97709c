package e2e

import (
	"path/filepath"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
)

// TestMemoryFidelity dumps and restores victims that set up some memory
// state (testdata/victims/mem_*.c) twice in a row; each verifies its
// memory from the inside after every restore ("check ok" on SIGUSR1),
// before and after a second cycle that dumps the restored tree.
func TestMemoryFidelity(t *testing.T) {
	e := setup(t)
	tests := []struct {
		name string
		args []string
	}{
		// Shared anonymous memory: pages only a child or an exited
		// child wrote, a mapping none of whose VMAs covers the object
		// whole, identity (/dev/zero (deleted), device, inode shared by
		// parent and child) and live sharing after the restore.
		{"mem_shared", nil},
		// A private mapping of a memfd partly copied on write and partly
		// following the file, an area partly unmapped, mapped again and
		// moved, a deleted sparse file mapped shared.
		{"mem_contents", []string{"DIR/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := e.startVictim(t, tc.name, tc.args...)
			v.check(t)
			for cycle := 1; cycle <= 2; cycle++ {
				img := filepath.Join(t.TempDir(), "img")
				e.dumpKill(t, v, img)
				e.restore(t, v, img)
				v.check(t)
			}
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
		})
	}
}

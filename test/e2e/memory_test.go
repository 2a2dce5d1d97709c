package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
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

// TestSysVShm restores System V shared memory attached by a tree (a keyed
// segment shared by parent and child, a segment marked for removal while
// attached): first into the same segment, still there after the dump
// killed the tree, then, the segment removed, into one created again with
// its old id. A segment attached outside the tree is refused by name, and
// the tree keeps running.
func TestSysVShm(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "mem_sysv")
	start := v.lines()[0]
	m := regexp.MustCompile(`shmid=(\d+) `).FindStringSubmatch(start)
	if m == nil {
		t.Fatalf("no shmid in %q", start)
	}
	id, _ := strconv.Atoi(m[1])
	t.Cleanup(func() { unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	v.check(t)
	for _, how := range []string{"same segment", "segment created again"} {
		img := filepath.Join(t.TempDir(), "img")
		e.dumpKill(t, v, img)
		if how == "segment created again" {
			if _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); err != nil {
				t.Fatalf("remove segment %d: %v", id, err)
			}
		}
		e.restore(t, v, img)
		v.check(t)
	}

	mem, err := unix.SysvShmAttach(id, 0, unix.SHM_RDONLY)
	if err != nil {
		t.Fatalf("attach segment %d: %v", id, err)
	}
	res := e.runCkpt(t, nil, "dump", "--dir", filepath.Join(t.TempDir(), "img"), strconv.Itoa(v.pid))
	unix.SysvShmDetach(mem)
	want := fmt.Sprintf("SysV shared memory segment %d is also attached by processes outside the dump", id)
	if res.code == 0 || !strings.Contains(res.stderr, want) {
		t.Errorf("dump of a tree sharing a segment with an outsider: %v; want a failure saying %q", res, want)
	}
	v.waitNewTicks(t, 3)
	v.check(t)
	testenv.CheckTicks(t, e.bye(t, v))
}

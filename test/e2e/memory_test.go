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

// Memory cases that fit the fidelity protocol are rows of test/fidelity
// (mem_*). TestSysVShm restores System V shared memory attached by a tree (a keyed
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

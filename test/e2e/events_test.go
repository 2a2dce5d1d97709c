package e2e

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
)

// fdSnapshot describes the fds of pid by what stays the same across a
// restore: the file (pipe inode numbers left out), the open flags and the
// static state of event files (epoll items without the target's inode,
// timerfd clock and interval, signalfd mask, eventfd mode).
func fdSnapshot(pid int) map[int]string {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	m := map[int]string{}
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
		if strings.HasPrefix(link, "pipe:[") {
			link = "pipe"
		}
		desc := []string{link}
		var items []string
		for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd)), "\n") {
			k, _, _ := strings.Cut(l, ":")
			switch k {
			case "flags", "clockid", "it_interval", "settime flags", "sigmask", "eventfd-semaphore":
				desc = append(desc, strings.Join(strings.Fields(l), " "))
			case "tfd":
				if i := strings.Index(l, " pos:"); i >= 0 {
					l = l[:i]
				}
				items = append(items, strings.Join(strings.Fields(l), " "))
			}
		}
		slices.Sort(items)
		m[fd] = strings.Join(append(desc, items...), "; ")
	}
	return m
}

// compareFDs reports every difference between two fdSnapshots.
func compareFDs(t *testing.T, why string, before, after map[int]string) {
	t.Helper()
	for fd, b := range before {
		if a, ok := after[fd]; !ok {
			t.Errorf("%s: fd %d (%s) is missing", why, fd, b)
		} else if a != b {
			t.Errorf("%s: fd %d is\n\t%s\nwant\n\t%s", why, fd, a, b)
		}
	}
	for fd, a := range after {
		if _, ok := before[fd]; !ok {
			t.Errorf("%s: fd %d (%s) was not there before the dump", why, fd, a)
		}
	}
}

// sigQueued is the signal evloop reads, 3 at a time, from its second
// signalfd at every check: SIGRTMIN+6 of glibc.
const sigQueued = syscall.Signal(40)

// queue3 queues the 3 sigQueued signals evloop's next check reads, with
// values *last+1, *last+2, *last+3 (rt_sigqueueinfo, SI_QUEUE).
func queue3(t *testing.T, v *victim, last *int) {
	t.Helper()
	for i := 0; i < 3; i++ {
		*last++
		var si [sys.SigInfoSize]byte
		binary.LittleEndian.PutUint32(si[0:], uint32(sigQueued))
		binary.LittleEndian.PutUint32(si[8:], ^uint32(0)) // si_code SI_QUEUE (-1)
		binary.LittleEndian.PutUint32(si[16:], uint32(os.Getpid()))
		binary.LittleEndian.PutUint32(si[24:], uint32(*last)) // si_value.sival_int
		if err := sys.RtSigqueueinfo(sys.PID(v.pid), sigQueued, &si); err != nil {
			t.Fatalf("queue signal %d to %d: %v", sigQueued, v.pid, err)
		}
	}
}

// TestEventLoop runs evloop, a single-threaded event loop blocked in
// epoll_wait(-1) on a timerfd (its clock), an edge-triggered eventfd with a
// count always pending, a pipe to itself and a signalfd
// (check and bye arrive through it), through two dump+restore cycles.
// After each restore the timerfd must go on firing (ticks), the fds must
// be the same (numbers, files, flags, epoll items with their event masks
// and data, timer interval, signal mask), the victim's own checks of the
// eventfd count, the pipe sequence and the epoll events must pass, and
// the signals must still come through the signalfd; 3 SIGRTMIN+6 queued
// with values before the dump must still be pending after the restore, in
// order with their values (a second signalfd). "closed-fd item" adds
// an epoll item whose registered fd number was closed after a dup.
func TestEventLoop(t *testing.T) {
	e := setup(t)
	// Build before the parallel subtests: two concurrent BuildVictim calls
	// of one victim in one process compile to the same temporary name.
	testenv.BuildVictim(t, "evloop")
	tests := []struct {
		name string
		args []string
	}{
		{"plain", nil},
		{"closed-fd item", []string{"closed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := e.startVictim(t, "evloop", tc.args...)
			v.waitTick(t, 6) // from tick 5 on, the eventfd always has a count
			queued := 0
			queue3(t, v, &queued)
			v.check(t) // the victim's own check holds before any dump
			for cycle := 1; cycle <= 2; cycle++ {
				queue3(t, v, &queued)
				if p := statusField(v.pid, "ShdPnd"); !sigBit(p, sigQueued) {
					t.Fatalf("cycle %d: before the dump: ShdPnd %s has no signal %d", cycle, p, sigQueued)
				}
				before := fdSnapshot(v.pid)
				img := filepath.Join(t.TempDir(), "img")
				e.dumpKill(t, v, img)
				if cycle == 1 {
					kinds := kindsOf(e.showProcess(t, img, v.pid))
					for _, k := range []string{"epoll", "eventfd", "pipe", "signalfd", "timerfd"} {
						if !slices.Contains(kinds, k) {
							t.Errorf("ckpt show --json: the image has files of kinds %v, no %s", kinds, k)
						}
					}
				}
				e.restore(t, v, img)
				if p := statusField(v.pid, "ShdPnd"); !sigBit(p, sigQueued) {
					t.Errorf("cycle %d: after restore: ShdPnd %s has no signal %d", cycle, p, sigQueued)
				}
				compareFDs(t, fmt.Sprintf("cycle %d: restored pid %d", cycle, v.pid), before, fdSnapshot(v.pid))
				// 15 ticks: eventfd writes at every 5th, the closed-fd
				// item's at every 7th; a missing event shows at the next.
				v.waitNewTicks(t, 15)
				v.check(t)
				if t.Failed() {
					t.FailNow()
				}
			}
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
			checkLogFile(t, v, 3)
		})
	}
}

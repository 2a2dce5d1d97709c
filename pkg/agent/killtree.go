package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// held is a process of a tree being killed, held by a pidfd: signals go
// to that process, never to a PID number it may have left to another.
type held struct {
	pid int
	fd  *sys.FD
}

// alive tells whether the process behind pidfd fd has not been reaped yet
// (a zombie is still there; its PID is not free).
func alive(fd *sys.FD) bool { return sys.PidfdSendSignal(fd, 0) == nil }

// holdTree opens a pidfd on pid, if it is the agent or one of its
// descendants, and on each of its descendants, parents first: the
// children of every thread, from /proc/PID/task/TID/children. A child is
// held only if it is still its parent's once its pidfd is open (its PID
// was not freed and taken again in between). A process forked while the
// tree is read is missed; kill's SIGKILL stops the parents from forking
// more, and their orphans come to the agent (as PID 1, or subreaper).
func holdTree(pid int) []held {
	fd, err := sys.PidfdOpen(sys.PID(pid), 0)
	if err != nil {
		return nil
	}
	if !sys.DescendantOf(sys.PID(pid), sys.PID(os.Getpid())) || !alive(fd) {
		fd.Close()
		return nil
	}
	out := []held{{pid, fd}}
	for i := 0; i < len(out); i++ {
		for _, c := range children(out[i].pid) {
			cfd, err := sys.PidfdOpen(sys.PID(c), 0)
			if err != nil {
				continue
			}
			// /proc/c was cfd's process if it is still there after the
			// read, and out[i] was its parent if it still is.
			if sys.ParentOf(sys.PID(c)) != sys.PID(out[i].pid) || !alive(cfd) || !alive(out[i].fd) {
				cfd.Close()
				continue
			}
			out = append(out, held{c, cfd})
		}
	}
	return out
}

// children lists the children of every thread of pid.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// tree returns pid and its descendants, parents first (holdTree's PIDs).
func tree(pid int) []int {
	var out []int
	for _, h := range holdTree(pid) {
		out = append(out, h.pid)
		h.fd.Close()
	}
	return out
}

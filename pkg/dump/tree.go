package dump

import (
	"errors"
	"fmt"
	"time"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// member is one process of the dumped tree.
type member struct {
	pid  int
	comm string
	fz   *frozen        // nil for a zombie
	p    *image.Process // set for zombies when frozen, for the others by collect
	plan *memPlan
}

// tree is the state shared by the dumpers of one tree's processes: the
// image-wide file table and the data records.
type tree struct {
	opts     *Options
	members  []*member // parents before children
	files    []openFile
	fileData []fileData
	nextData int
	ghosts   map[[2]uint64]int // dev, ino of a deleted file -> its data ID
	socks    sockState
}

func (t *tree) addData(b []byte) int {
	t.nextData++
	t.fileData = append(t.fileData, fileData{id: t.nextData, data: b})
	return t.nextData
}

// freeze stops the whole tree before anything is read: the root first, then
// the children of each frozen process (a frozen process cannot fork any
// more, so its list of children is final). Children that have exited and
// wait to be reaped are kept as zombies.
func (t *tree) freeze(root int) error {
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		st, err := proc.ReadStat(pid, 0)
		if err != nil {
			if pid == root {
				t.release()
				return fmt.Errorf("%w: %v", ErrNoProcess, err)
			}
			continue // exited and reaped meanwhile
		}
		m := &member{pid: pid, comm: st.Comm}
		if st.State == 'Z' && pid != root {
			m.p = zombie(st)
			t.members = append(t.members, m)
			continue
		}
		if m.fz, err = freeze(pid); err != nil {
			if errors.Is(err, unix.ESRCH) && pid != root {
				if st, err2 := proc.ReadStat(pid, 0); err2 == nil && st.State == 'Z' {
					m.p = zombie(st)
					t.members = append(t.members, m)
				}
				continue
			}
			t.release()
			return fmt.Errorf("process %d (%s): %w", pid, st.Comm, err)
		}
		t.members = append(t.members, m)
		kids, err := proc.Children(pid)
		if err != nil {
			t.release()
			return fmt.Errorf("process %d: list children: %w", pid, err)
		}
		queue = append(queue, kids...)
	}
	return nil
}

func zombie(st *proc.Stat) *image.Process {
	return &image.Process{PID: st.PID, PPID: st.PPID, PGID: st.PGRP, SID: st.Session, Comm: st.Comm,
		Zombie: true, ExitStatus: st.ExitCode}
}

// release lets every process go on as before.
func (t *tree) release() {
	for i := len(t.members) - 1; i >= 0; i-- {
		if fz := t.members[i].fz; fz != nil {
			fz.release()
		}
	}
}

// kill kills every frozen process; none runs again.
func (t *tree) kill() {
	for _, m := range t.members {
		if m.fz != nil {
			m.fz.kill()
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, m := range t.members {
		if m.fz != nil {
			m.fz.waitDead(deadline)
		}
	}
}

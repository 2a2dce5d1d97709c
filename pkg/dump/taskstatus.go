package dump

import "github.com/ckpt/ckpt/pkg/proc"

// readStatus returns the task's /proc/TID/status, read once: what it says
// (credentials, seccomp mode, thread features) cannot change while the
// task is frozen.
func (t *task) readStatus() (*proc.Status, error) {
	if t.status != nil {
		return t.status, nil
	}
	st, err := proc.ReadStatus(t.tid)
	if err != nil {
		return nil, err
	}
	t.status = st
	return st, nil
}

// readStat returns the task's /proc/PID/task/TID/stat (pid is its
// process), read once for the same reason (its state and flags).
func (t *task) readStat(pid int) (*proc.Stat, error) {
	if t.stat != nil {
		return t.stat, nil
	}
	st, err := proc.ReadStat(pid, t.tid)
	if err != nil {
		return nil, err
	}
	t.stat = st
	return st, nil
}

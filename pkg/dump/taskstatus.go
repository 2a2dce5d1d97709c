package dump

import (
	"runtime"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/proc"
)

// readStatus returns the task's /proc/TID/status, read once: what it says
// (credentials, seccomp mode, thread features) cannot change while the
// task is frozen.
func (t *task) readStatus() (*proc.Status, error) {
	t.waitPrefetch()
	if t.status != nil {
		return t.status, nil
	}
	st, err := proc.ReadThreadStatus(t.tid)
	if err != nil {
		return nil, err
	}
	t.status = st
	return st, nil
}

// readStat returns the task's /proc/PID/task/TID/stat (pid is its
// process), read once for the same reason (its state and flags).
func (t *task) readStat(pid sys.PID) (*proc.Stat, error) {
	t.waitPrefetch()
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

// readFile returns the task's /proc file name (pid is its process): comm
// and timerslack_ns as prefetch read them, any other read now.
func (t *task) readFile(pid sys.PID, name string) ([]byte, error) {
	t.waitPrefetch()
	if b, ok := t.files[name]; ok {
		return b, nil
	}
	return proc.ReadFile(t.path(pid, name))
}

// path is where the task's /proc file name is: timer slack only at
// /proc/TID (the task directories lack it), the others in its task
// directory.
func (t *task) path(pid sys.PID, name string) string {
	if name == "timerslack_ns" {
		return proc.ThreadPath(t.tid, name)
	}
	return proc.Path(pid, "task", t.tid.String(), name)
}

// prefetched are the /proc files of a thread prefetch reads besides
// status and stat.
var prefetched = []string{"comm", "timerslack_ns"}

// prefetch reads the status, stat and the prefetched files of every task
// of a frozen process of many threads in the background, on as many goroutines as there are
// CPUs (at most 4): the dump's other work goes on meanwhile, and a
// thread's /proc files need no ptrace (which only the tracer's thread may
// call). readStatus and readStat wait for a task's; one that failed is
// read again, to report the error.
func (fz *frozen) prefetch() {
	if len(fz.tasks) < 4 {
		return
	}
	work := make(chan *task, len(fz.tasks))
	for _, t := range fz.tasks {
		t.fetched = make(chan struct{})
		work <- t
	}
	close(work)
	for range min(runtime.NumCPU(), 4) {
		go func() {
			for t := range work {
				t.status, _ = proc.ReadThreadStatus(t.tid)
				t.stat, _ = proc.ReadStat(fz.pid, t.tid)
				t.files = map[string][]byte{}
				for _, name := range prefetched {
					if b, err := proc.ReadFile(t.path(fz.pid, name)); err == nil {
						t.files[name] = b
					}
				}
				close(t.fetched)
			}
		}()
	}
}

// waitPrefetch waits until prefetch has read the task's files, if it
// reads them.
func (t *task) waitPrefetch() {
	if t.fetched != nil {
		<-t.fetched
	}
}

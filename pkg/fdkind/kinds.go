package fdkind

// Table lists every kind of open file description, in the order an fd is
// matched against them (the first kind whose Match says yes describes
// it). It builds a new table each time: there is no package state to
// change.
func Table() []Kind {
	return []Kind{
		// Refused by name, at dump time, while the process can go on.
		{Name: "io_uring", Match: anon("[io_uring]"), Describe: refuse("io_uring instance")},
		{Name: "bpf", Match: anon("bpf-*", "bpf_link", "bpf_iter"), Describe: refuse("bpf object (map, program or link)")},
		{Name: "perf_event", Match: anon("[perf_event]"), Describe: refuse("perf_event")},
		{Name: "userfaultfd", Match: anon("[userfaultfd]"), Describe: refuse("userfaultfd")},
		// Anonymous-inode files.
		eventfd(), timerfd(), signalfd(), epoll(), pidfd(), inotify(), fanotify(),
		// Files with a type of their own.
		pipe(), fifo(), socket(), ptmx(), tty(), charDev(), dir(), symlink(), nsFile(), regular(),
	}
}

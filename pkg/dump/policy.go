package dump

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// DefaultAcceptRetries is how many times a dump is tried again, by
// default, when a listener of the dumped processes has connections
// waiting in its accept queue (they cannot be saved): the processes run
// AcceptRetryWait between tries and may accept them meanwhile.
const DefaultAcceptRetries = 20

// AcceptRetryWait is how long the processes run between two tries.
const AcceptRetryWait = 50 * time.Millisecond

// acceptRetries is how many retries opts allow.
func (o *Options) acceptRetries() int {
	switch {
	case o.AcceptRetries < 0:
		return 0
	case o.AcceptRetries == 0:
		return DefaultAcceptRetries
	}
	return o.AcceptRetries
}

// DefaultGuardExe returns the executable a dump runs as the guard of its
// network lock (`EXE netlock-guard ...`, see netlock.StartGuard) when
// Options.GuardExe is empty: the running executable if it is ckpt, else a
// ckpt next to it, else "" (no guard).
func DefaultGuardExe() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if filepath.Base(exe) == "ckpt" {
		return exe
	}
	c := filepath.Join(filepath.Dir(exe), "ckpt")
	if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return c
	}
	return ""
}

// holdSink passes a dump's records on to its sink but holds back an
// Abort, so that a try that failed before it wrote anything can be
// followed by another into the same sink.
type holdSink struct {
	Sink
	written bool // a record went to the sink: no retry
	aborted bool // the try aborted the sink
}

func (s *holdSink) WriteHeader(h *image.Header) error {
	s.written = true
	return s.Sink.WriteHeader(h)
}

func (s *holdSink) WriteProcess(p *image.Process) error {
	s.written = true
	return s.Sink.WriteProcess(p)
}

func (s *holdSink) WriteFileData(id int, data []byte) error {
	s.written = true
	return s.Sink.WriteFileData(id, data)
}

func (s *holdSink) WritePrepared(rec *image.Prepared) error {
	s.written = true
	return s.Sink.WritePrepared(rec)
}

func (s *holdSink) Abort() { s.aborted = true }

// Prepare prepares the sink if it is a Preparer.
func (s *holdSink) Prepare() error {
	if p, ok := s.Sink.(Preparer); ok {
		return p.Prepare()
	}
	return nil
}

// retryable says whether a failed try may be followed by another.
func (s *holdSink) retryable(err error) bool {
	return errors.Is(err, sockets.ErrAcceptQueue) && !s.written
}

// acceptQueues fails with sockets.ErrAcceptQueue, naming the process and
// the fd, if a listener of the tree has connections waiting to be
// accepted, which cannot be saved. Run looks before a group's barrier
// (AfterFreeze), where a failed try can still be followed by another;
// describing the files would find the same later, past it.
func (t *tree) acceptQueues() error {
	for key, sock := range t.socks.fds {
		pid, fd, our := key.pid, key.fd, sock.Int()
		dom, err := unix.GetsockoptInt(our, unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil {
			continue // described (and refused, if need be) with the files
		}
		switch dom {
		case unix.AF_INET, unix.AF_INET6:
			if st, err := sockets.State(our); err != nil || st != sockets.StateListen {
				continue
			}
			if s, err := sockets.Describe(our); errors.Is(err, sockets.ErrAcceptQueue) {
				if t.opts.SkipInFlight {
					t.opts.logf("process %d fd %d: listening socket %s: dropping the connections waiting in its accept queue (--skip-in-flight): their clients get a reset when they next send", pid, fd, s.Local)
					continue
				}
				return fmt.Errorf("process %d fd %d: %w (let the process accept them, or dump with --skip-in-flight to drop them)", pid, fd, err)
			}
		case unix.AF_UNIX:
			var st unix.Stat_t
			if unix.Fstat(our, &st) != nil {
				continue
			}
			all, err := t.UnixSockets()
			if err != nil {
				return err
			}
			// Connections from clients of the tree are restored
			// (sockets.DescribeUnix), those whose client sent data or
			// was closed once read from the kernel (fdkind.WaitingConns);
			// others are refused.
			if u, ok := all[uint32(st.Ino)]; ok && u.State == sockets.UnixListenState && u.Pending > 0 {
				if c, ok := t.unreadableWaiting(u.Icons); !ok {
					if c != 0 && !t.socks.inos[c] {
						return fmt.Errorf("process %d fd %d: UNIX socket %s with %d connections not accepted yet, one from socket %d outside the dump: %w",
							pid, fd, u.Name, u.Pending, c, sockets.ErrAcceptQueue)
					}
					if _, err := fdkind.WaitingConns(t, u.Ino, u.Name, u.Icons); err != nil {
						return fmt.Errorf("process %d fd %d: %w: %w", pid, fd, err, sockets.ErrAcceptQueue)
					}
				}
			}
		}
	}
	return nil
}

// unreadableWaiting checks the clients whose connections wait in a UNIX
// listener's queue: ok if all are sockets of the tree that sent nothing
// yet; otherwise it returns the first that is not.
func (t *tree) unreadableWaiting(icons []uint32) (uint32, bool) {
	byIno := map[uint32]int{}
	for _, sock := range t.socks.fds {
		var st unix.Stat_t
		if unix.Fstat(sock.Int(), &st) == nil {
			byIno[uint32(st.Ino)] = sock.Int()
		}
	}
	for _, c := range icons {
		our, ok := byIno[c]
		if !ok {
			return c, false
		}
		if out, err := unix.IoctlGetInt(our, unix.SIOCOUTQ); err != nil || out > 0 {
			return c, false
		}
	}
	return 0, true
}

// SkipInFlight implements fdkind.SocketDumpEnv: Options.SkipInFlight.
func (t *tree) SkipInFlight() bool { return t.opts.SkipInFlight }

// ExternalUnix implements fdkind.SocketDumpEnv: Options.ExternalUnix
// allows every UNIX socket connected outside the dump (a 0 in it) or
// those it names.
func (t *tree) ExternalUnix(ino uint32) bool {
	for _, i := range t.opts.ExternalUnix {
		if i == 0 || i == ino {
			return true
		}
	}
	return false
}

// Member implements fdkind.SocketDumpEnv: whether pid is a live
// process (not a zombie) of the tree.
func (t *tree) Member(pid sys.PID) bool {
	for _, m := range t.members {
		if (m.pid == pid || m.rd() == pid) && m.fz != nil { // rd: a live thread of a process whose leader exited
			return true
		}
	}
	return false
}

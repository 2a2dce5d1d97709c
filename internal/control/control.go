// Package control is the line protocol between an agent and the ckpt or
// ckpt-redo process it runs for a group operation.
//
// The child is given one end of a socket pair as `--control FD`. It writes
// an event line when it reaches a point the group must agree on, and, where
// the group must wait for every member, reads the coordinator's decision
// from the same fd: the expected word to go on, anything else (or EOF, if
// the agent died) to abort. Lines are plain words, e.g.
//
//	ckpt dump:   "frozen" → "continue" | "abort"
//	             "progress DONE TOTAL" (bytes of memory written, a few times a second)
//	             "prepared" → "commit" | "abort"
//	ckpt-redo:   "listening ADDR"
//	             "built" → "release" | "abort"   (image from a directory)
//	             "released"
package control

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrAborted means the group decided to abort.
var ErrAborted = errors.New("aborted by the group coordinator")

// Channel is the child's end of the control socket.
type Channel struct {
	f    *os.File
	r    *bufio.Reader
	mu   sync.Mutex // events may come from several goroutines
	last time.Time  // of the last progress event
}

// Open takes over fd as the control channel.
func Open(fd int) (*Channel, error) {
	f := os.NewFile(uintptr(fd), "control")
	if f == nil {
		return nil, fmt.Errorf("--control %d: not an open file descriptor", fd)
	}
	if _, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("--control %d: %w", fd, err)
	}
	// Not for the tool's own children (the network lock guard, say): the
	// agent learns that the tool is done when the channel closes.
	unix.CloseOnExec(fd)
	return &Channel{f: f, r: bufio.NewReader(f)}, nil
}

// Event reports one event line.
func (c *Channel) Event(format string, args ...any) error {
	if c == nil {
		return nil
	}
	line := fmt.Sprintf(format, args...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.f, line+"\n"); err != nil {
		return fmt.Errorf("control: report %q: %w", line, err)
	}
	return nil
}

// Await reports event and waits for the decision: nil if it is want,
// ErrAborted otherwise.
func (c *Channel) Await(event, want string) error {
	if c == nil {
		return nil
	}
	if err := c.Event("%s", event); err != nil {
		return err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("after %q: control channel closed: %w", event, ErrAborted)
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("after %q: told %q: %w", event, got, ErrAborted)
	}
	return nil
}

// Progress reports done of total bytes, at most four times a second (and
// always at the end).
func (c *Channel) Progress(done, total int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	now := time.Now()
	skip := now.Sub(c.last) < 250*time.Millisecond && done < total
	if !skip {
		c.last = now
	}
	c.mu.Unlock()
	if !skip {
		c.Event("progress %d %d", done, total)
	}
}

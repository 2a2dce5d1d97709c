package control

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// pair returns the child's Channel and the agent's end of a socket pair.
func pair(t *testing.T) (*Channel, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	agent := os.NewFile(uintptr(fds[1]), "agent")
	t.Cleanup(func() { c.f.Close(); agent.Close() })
	return c, agent
}

func TestAwait(t *testing.T) {
	tests := []struct {
		name  string
		reply string // "" closes the agent's end
		err   error
	}{
		{"go on", "continue\n", nil},
		{"abort", "abort\n", ErrAborted},
		{"something else", "commit\n", ErrAborted},
		{"agent gone", "", ErrAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, agent := pair(t)
			got := make(chan string, 1)
			go func() {
				line, _ := bufio.NewReader(agent).ReadString('\n')
				got <- line
				if tt.reply == "" {
					agent.Close()
				} else {
					agent.WriteString(tt.reply)
				}
			}()
			err := c.Await("frozen", "continue")
			if line := <-got; line != "frozen\n" {
				t.Errorf("agent read %q, want the event line", line)
			}
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("Await: %v, want %v", err, tt.err)
			}
		})
	}
}

func TestProgressRateLimited(t *testing.T) {
	c, agent := pair(t)
	for i := int64(1); i <= 1000; i++ {
		c.Progress(i, 1000)
	}
	c.Event("done")
	r := bufio.NewReader(agent)
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "done\n" {
			break
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	// The first update and the final one, and nothing in between at this
	// pace: a dump reports a few times a second, not per batch.
	if len(lines) != 2 || lines[0] != "progress 1 1000" || lines[1] != "progress 1000 1000" {
		t.Fatalf("progress lines %q", lines)
	}
}

func TestNilChannel(t *testing.T) {
	var c *Channel
	if err := c.Await("frozen", "continue"); err != nil {
		t.Fatalf("a nil channel (no --control) must let everything through: %v", err)
	}
	c.Progress(1, 2)
	if err := c.Event("x"); err != nil {
		t.Fatal(err)
	}
}

func TestOpenBadFD(t *testing.T) {
	if _, err := Open(987); err == nil {
		t.Fatal("Open of a closed fd succeeded")
	}
}

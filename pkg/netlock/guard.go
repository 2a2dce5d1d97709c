package netlock

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// GuardCommand is the hidden ckpt subcommand that runs RunGuard.
const GuardCommand = "netlock-guard"

// A Guard is a process that removes a lock unless told to keep it: if ckpt
// dies while the lock is taken, the guard sees its stdin close and removes
// the table.
type Guard struct {
	cmd *exec.Cmd
	w   *os.File
}

// StartGuard starts `exe netlock-guard TABLE` in its own session (so that a
// ^C meant for ckpt does not kill it first).
func StartGuard(exe, tableName string) (*Guard, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, GuardCommand, tableName)
	cmd.Stdin = r
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("netlock: start guard: %w", err)
	}
	r.Close()
	return &Guard{cmd: cmd, w: w}, nil
}

// Keep tells the guard to leave the lock in place, and waits for it.
func (g *Guard) Keep() error {
	_, err := io.WriteString(g.w, "keep\n")
	g.w.Close()
	if werr := g.cmd.Wait(); err == nil {
		err = werr
	}
	return err
}

// Drop lets the guard remove the lock, and waits for it.
func (g *Guard) Drop() error {
	g.w.Close()
	return g.cmd.Wait()
}

// RunGuard is the guard's side: it reads stdin to its end and removes the
// table unless it was told to keep it.
func RunGuard(tableName string, in io.Reader) error {
	b, _ := io.ReadAll(in)
	if strings.TrimSpace(string(b)) == "keep" {
		return nil
	}
	return Release(tableName)
}

package netlock

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/ckpt/ckpt/pkg/sockets"
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

// Socket is a dumped TCP connection the guard puts back if ckpt dies: out
// of repair mode, with its SO_REUSEADDR as it was.
type Socket struct {
	File  *os.File
	Reuse int
}

// StartGuard starts `exe netlock-guard TABLE NETNS REUSE...` in its own
// session (so that a ^C meant for ckpt does not kill it first), with a copy
// of every dumped connection and, if netns is not nil, the network
// namespace the lock is in.
func StartGuard(exe, tableName string, socks []Socket, netns *os.File) (*Guard, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	nsFD := -1
	if netns != nil {
		nsFD = 3 + len(socks)
	}
	args := []string{GuardCommand, tableName, strconv.Itoa(nsFD)}
	for _, s := range socks {
		args = append(args, strconv.Itoa(s.Reuse))
	}
	cmd := exec.Command(exe, args...)
	for _, s := range socks {
		cmd.ExtraFiles = append(cmd.ExtraFiles, s.File)
	}
	if netns != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, netns)
	}
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

// Keep tells the guard to leave the lock as it is (in place, or lifted
// by the caller already), and waits for it.
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

// RunGuard is the guard's side: it reads stdin to its end and, unless it
// was told to keep the lock, takes the connections (its fds 3, 4, ...; the
// SO_REUSEADDR value of each in args[1:]) out of repair mode and removes
// the table, in the network namespace of fd args[0] (-1: its own).
func RunGuard(tableName string, args []string, in io.Reader) error {
	if len(args) == 0 {
		return fmt.Errorf("netlock guard: no network namespace argument")
	}
	netns, err := strconv.Atoi(args[0])
	if err != nil {
		return fmt.Errorf("netlock guard: %w", err)
	}
	reuse := args[1:]
	b, _ := io.ReadAll(in)
	if strings.TrimSpace(string(b)) == "keep" {
		return nil
	}
	for i, r := range reuse {
		v, _ := strconv.Atoi(r)
		sockets.LeaveRepair(3+i, v)
	}
	return Release(tableName, netns)
}

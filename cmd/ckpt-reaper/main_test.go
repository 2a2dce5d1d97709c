package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		line    string
		want    request
		wantErr bool
	}{
		{"kill-all", request{Cmd: "kill-all"}, false},
		{"sync", request{Cmd: "sync"}, false},
		{"run /bin/true", request{Cmd: "run", Argv: []string{"/bin/true"}}, false},
		{"run --stdout /o --stderr /e --cwd /d --setsid -- a --b",
			request{Cmd: "run", Argv: []string{"a", "--b"}, Stdout: "/o", Stderr: "/e", Cwd: "/d", Setsid: true}, false},
		{`{"cmd":"run","argv":["sh","-c","exit 3"],"env":["A=1"]}`,
			request{Cmd: "run", Argv: []string{"sh", "-c", "exit 3"}, Env: []string{"A=1"}}, false},
		{"run --stdout", request{}, true},
		{"run --bogus x y", request{}, true},
		{"kill-all now", request{}, true},
		{"{bad json", request{}, true},
		{"signal 123 9", request{Cmd: "signal", PID: 123, Sig: 9}, false},
		{`{"cmd":"signal","pid":123,"sig":15}`, request{Cmd: "signal", PID: 123, Sig: 15}, false},
		{"signal 123", request{}, true},
		{"signal x 9", request{}, true},
	}
	for _, tc := range tests {
		got, err := parseRequest(tc.line)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: error %v, want error %v", tc.line, err, tc.wantErr)
			continue
		}
		if err == nil && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %+v, want %+v", tc.line, got, tc.want)
		}
	}
}

// TestExecMode runs commands under `ckpt-reaper exec` and checks its exit
// status and that nothing it started is left behind, not even as a zombie.
func TestExecMode(t *testing.T) {
	testenv.RequireRoot(t)
	reaper := testenv.ReaperBinary(t)
	tests := []struct {
		name   string
		argv   []string
		status int
	}{
		{"exit code", []string{"sh", "-c", "exit 7"}, 7},
		{"killed", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{"not found", []string{"/nonexistent/cmd"}, 1},
		// Background jobs and orphans are killed when the command exits.
		{"leftovers", []string{"sh", "-c", "sleep 100 & echo $!; (sleep 100 & echo $!) ; exit 0"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			cmd := exec.Command(reaper, append([]string{"exec", "--"}, tc.argv...)...)
			cmd.Stdout = &out
			cmd.WaitDelay = 5 * time.Second // if leftovers hold stdout open
			err := cmd.Run()
			var ee *exec.ExitError
			status := 0
			if errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tc.status {
				t.Errorf("exit status %d, want %d", status, tc.status)
			}
			for _, pid := range strings.Fields(out.String()) {
				if _, err := os.Stat("/proc/" + pid); err == nil {
					t.Errorf("process %s still exists after the reaper exited", pid)
				}
			}
		})
	}
}

// TestExecForwardsSIGTERM checks that SIGTERM to the reaper reaches the
// command.
func TestExecForwardsSIGTERM(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command(testenv.ReaperBinary(t), "exec", "--", "sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for the reaper to have run sleep: a SIGTERM before that would
	// reach the reaper's own Go runtime, not the command.
	deadline := time.Now().Add(10 * time.Second)
	for !childRuns(cmd.Process.Pid, "sleep") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the reaper did not start sleep within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if cmd.ProcessState.ExitCode() != 128+15 {
			t.Errorf("got %v, want exit status 143", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("reaper still running 10s after SIGTERM")
	}
}

// childRuns reports whether process parent has a child whose comm is comm.
func childRuns(parent int, comm string) bool {
	for _, pid := range childrenOf(parent) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if strings.TrimSpace(string(b)) == comm {
			return true
		}
	}
	return false
}

// childrenOf lists the children of process parent, from /proc/PID/task/*/children.
func childrenOf(parent int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(parent) + "/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(parent) + "/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

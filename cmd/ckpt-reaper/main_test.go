package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"reflect"
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
		{"run /bin/true", request{Cmd: "run", Argv: []string{"/bin/true"}}, false},
		{"run --stdout /o --stderr /e --cwd /d --setsid -- a --b",
			request{Cmd: "run", Argv: []string{"a", "--b"}, Stdout: "/o", Stderr: "/e", Cwd: "/d", Setsid: true}, false},
		{`{"cmd":"run","argv":["sh","-c","exit 3"],"env":["A=1"]}`,
			request{Cmd: "run", Argv: []string{"sh", "-c", "exit 3"}, Env: []string{"A=1"}}, false},
		{"run --stdout", request{}, true},
		{"run --bogus x y", request{}, true},
		{"kill-all now", request{}, true},
		{"{bad json", request{}, true},
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
	time.Sleep(200 * time.Millisecond)
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

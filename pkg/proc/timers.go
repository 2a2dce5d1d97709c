package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// Timer is one POSIX timer of /proc/PID/timers.
type Timer struct {
	ID       int
	Signal   int
	SigValue uint64
	// Notify is the sigev_notify: SIGEV_SIGNAL (0), SIGEV_NONE (1),
	// SIGEV_THREAD (2), or SIGEV_THREAD_ID (4) with NotifyTID.
	Notify    int
	NotifyTID sys.TID
	Clock     int
}

// ReadTimers parses /proc/PID/timers; a kernel without it (no
// CONFIG_CHECKPOINT_RESTORE) gives none.
func ReadTimers(pid sys.PID) ([]Timer, error) { return readTimers(root, pid) }

func readTimers(root string, pid sys.PID) ([]Timer, error) {
	b, err := os.ReadFile(filepath.Join(root, pid.String(), "timers"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t, err := parseTimers(b)
	if err != nil {
		return nil, fmt.Errorf("%s/%d/timers: %w", root, pid, err)
	}
	return t, nil
}

// parseTimers parses the timers file by hand (procfs does not read it):
//
//	ID: 0
//	signal: 14/0000000000001234
//	notify: signal/pid.1234   (or none/..., thread/..., signal/tid.N)
//	ClockID: 1
func parseTimers(b []byte) ([]Timer, error) {
	var out []Timer
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %q", line)
		}
		v = strings.TrimSpace(v)
		if k == "ID" {
			id, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("ID %q: %w", v, err)
			}
			out = append(out, Timer{ID: id})
			continue
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%s before an ID", k)
		}
		t := &out[len(out)-1]
		var err error
		switch k {
		case "signal":
			sig, val, _ := strings.Cut(v, "/")
			if t.Signal, err = strconv.Atoi(sig); err == nil {
				t.SigValue, err = strconv.ParseUint(val, 16, 64)
			}
		case "notify":
			how, who, _ := strings.Cut(v, "/")
			switch how {
			case "signal":
				t.Notify = 0
			case "none":
				t.Notify = 1
			case "thread":
				t.Notify = 2
			default:
				err = fmt.Errorf("unknown notification")
			}
			kind, n, ok := strings.Cut(who, ".")
			switch {
			case !ok || (kind != "pid" && kind != "tid"):
				err = fmt.Errorf("no pid or tid")
			case kind == "tid":
				t.Notify = 4 // SIGEV_THREAD_ID
				var tid int
				tid, err = strconv.Atoi(n)
				t.NotifyTID = sys.TID(tid)
			}
		case "ClockID":
			t.Clock, err = strconv.Atoi(v)
		}
		if err != nil {
			return nil, fmt.Errorf("timer %d: %s %q: %w", t.ID, k, v, err)
		}
	}
	return out, nil
}

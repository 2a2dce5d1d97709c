package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
)

// showImage is the part of `ckpt show --json` that TestShowTree compares
// with the text of `ckpt show`.
type showImage struct {
	Processes []struct {
		PID    int    `json:"pid"`
		Comm   string `json:"comm"`
		Zombie bool   `json:"zombie"`
		Files  []struct {
			ID   int    `json:"id"`
			Kind string `json:"kind"`
			Ref  struct {
				Path string `json:"path"`
			} `json:"ref"`
		} `json:"files"`
		FDs []struct {
			FD   int `json:"fd"`
			File int `json:"file"`
		} `json:"fds"`
	} `json:"processes"`
}

// fdLineRE is one fd line of `ckpt show`: number, kind, description, and
// in parentheses the file's image-wide ID and status flags.
var fdLineRE = regexp.MustCompile(`^ +(\d+) (\S+) +(.+) \(file (\d+), flags [0-7]+.*\)$`)

// TestShowTree dumps the tree victim (several processes, a zombie, a log
// file shared by all and a pipe between two of them) and checks `ckpt
// show` and `ckpt show --json` on it: no panic (File IDs are image-wide, a
// process's fd may use a file another process lists), every process of the
// JSON in the text, and one line per fd with its number, its file's kind
// and what it is.
func TestShowTree(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	v := &victim{name: "tree", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
	v.pid = e.r.Run(t, testenv.RunOpts{Stderr: v.stderr, Dir: dir, Setsid: true}, testenv.VictimArgv(t, "tree", v.log)...)
	v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "start ") })
	v.waitTick(t, 1)
	v.comm, v.exe = comm(v.pid), exeOf(v.pid)
	v.cmd = readFile(fmt.Sprintf("/proc/%d/cmdline", v.pid))
	v.waitLine(t, func(l string) bool { return strings.HasPrefix(l, "got ") })
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)

	res := e.runCkpt(t, nil, "show", "--json", img)
	if res.code != 0 {
		t.Fatalf("ckpt show --json: %v", res)
	}
	var s showImage
	if err := json.Unmarshal([]byte(res.stdout), &s); err != nil {
		t.Fatalf("ckpt show --json: %v", err)
	}
	if len(s.Processes) < 5 {
		t.Fatalf("ckpt show --json: %d processes, want the 5 or 6 of the tree", len(s.Processes))
	}
	kinds := map[int]string{}
	paths := map[int]string{}
	lister := map[int]int{}
	for _, p := range s.Processes {
		for _, f := range p.Files {
			kinds[f.ID], paths[f.ID], lister[f.ID] = f.Kind, f.Ref.Path, p.PID
		}
	}

	res = e.runCkpt(t, nil, "show", img)
	if res.code != 0 || strings.Contains(res.stderr, "panic") {
		t.Fatalf("ckpt show: %v", res)
	}
	blocks := map[int][]string{}
	var cur []string
	curPID := 0
	for _, l := range strings.Split(res.stdout, "\n") {
		var pid int
		if n, _ := fmt.Sscanf(l, "process %d (", &pid); n == 1 {
			blocks[curPID] = cur
			cur, curPID = nil, pid
		}
		cur = append(cur, l)
	}
	blocks[curPID] = cur
	shared := 0
	for _, p := range s.Processes {
		block, ok := blocks[p.PID]
		if !ok {
			t.Errorf("ckpt show: no process %d (%s):\n%s", p.PID, p.Comm, res.stdout)
			continue
		}
		if !strings.HasPrefix(block[0], fmt.Sprintf("process %d (%s)", p.PID, p.Comm)) {
			t.Errorf("ckpt show: process line %q, want pid %d comm %s", block[0], p.PID, p.Comm)
		}
		if p.Zombie {
			continue
		}
		at := -1
		for i, l := range block {
			if l == fmt.Sprintf("  fds (%d):", len(p.FDs)) {
				at = i + 1
			}
		}
		if at < 0 || at+len(p.FDs) > len(block) {
			t.Errorf("ckpt show: process %d: no list of its %d fds:\n%s", p.PID, len(p.FDs), strings.Join(block, "\n"))
			continue
		}
		for i, fd := range p.FDs {
			line := block[at+i]
			m := fdLineRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("ckpt show: process %d fd %d: line %q is not `FD KIND WHAT (file ID, flags ...)`", p.PID, fd.FD, line)
				continue
			}
			if m[1] != fmt.Sprint(fd.FD) || m[2] != kinds[fd.File] || m[4] != fmt.Sprint(fd.File) {
				t.Errorf("ckpt show: process %d: line %q, want fd %d of kind %s, file %d", p.PID, line, fd.FD, kinds[fd.File], fd.File)
			}
			if path := paths[fd.File]; path != "" && kinds[fd.File] == "reg" && !strings.Contains(m[3], path) {
				t.Errorf("ckpt show: process %d fd %d: line %q does not name %s", p.PID, fd.FD, line, path)
			}
			if lister[fd.File] != p.PID {
				shared++
				if !strings.Contains(line, "shared") {
					t.Errorf("ckpt show: process %d fd %d: line %q does not say the file is shared (listed by %d)", p.PID, fd.FD, line, lister[fd.File])
				}
			}
		}
	}
	if shared == 0 {
		t.Errorf("ckpt show: no fd uses a file another process lists; the tree shares its log")
	}

	// The image, shown, still restores, and the tree goes on.
	e.restore(t, v, img)
	v.waitNewTicks(t, 3)
	v.check(t)
	testenv.CheckTicks(t, e.bye(t, v))
}

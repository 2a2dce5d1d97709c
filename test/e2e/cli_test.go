package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
)

// TestCLIDumpWhere: `ckpt dump --help` says that one of --dir and --to is
// required, and a dump given neither or both refuses with a usage error
// that says what to give; options after the PID (which the flag parser
// does not read) are named.
func TestCLIDumpWhere(t *testing.T) {
	e := setup(t)
	pid := strconv.Itoa(os.Getpid())
	tests := []struct {
		name   string
		args   []string
		code   int
		output string // in stdout (help) or stderr (errors)
	}{
		{"help", []string{"dump", "--help"}, 0, "Exactly one of --dir and --to is required"},
		{"neither", []string{"dump", pid}, 2, "--dir DIR (a directory) or --to HOST:PORT (a receiver)"},
		{"both", []string{"dump", "--dir", filepath.Join(t.TempDir(), "img"), "--to", "127.0.0.1:1", pid}, 2, "--dir and --to exclude each other"},
		{"option after the PID", []string{"dump", pid, "--dir", filepath.Join(t.TempDir(), "img")}, 2, "dump: --dir comes after the PID: options go before it"},
		{"two PIDs", []string{"dump", "--dir", filepath.Join(t.TempDir(), "img"), pid, pid}, 2, "dump: want exactly one PID"},
		{"show: option after the directory", []string{"show", t.TempDir(), "--json"}, 2, "show: --json comes after the DIR"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := e.runCkpt(t, nil, tc.args...)
			if res.code != tc.code || !strings.Contains(res.stdout+res.stderr, tc.output) {
				t.Errorf("ckpt %s: %v; want exit code %d and %q", strings.Join(tc.args, " "), res, tc.code, tc.output)
			}
		})
	}
}

// TestCLIHelp: help lists no "help" command (urfave/cli adds one unless
// told not to): ckpt-redo has no subcommands at all.
func TestCLIHelp(t *testing.T) {
	e := setup(t)
	tests := []struct {
		argv []string
		want string // an option or command the help must list
	}{
		{[]string{e.redo(), "--help"}, "--listen"},
		{[]string{e.ckpt(), "--help"}, "dump"},
		{[]string{e.ckpt(), "group", "--help"}, "checkpoint"},
		{[]string{e.ckpt(), "parity", "--help"}, "encode"},
	}
	for _, tc := range tests {
		out, err := exec.Command(tc.argv[0], tc.argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(tc.argv, " "), err, out)
		}
		s := string(out)
		if strings.Contains(s, "help, h") || !strings.Contains(s, tc.want) || (tc.argv[0] == e.redo() && strings.Contains(s, "COMMANDS:")) {
			t.Errorf("%s lists a help command (or misses %q):\n%s", strings.Join(tc.argv[1:], " "), tc.want, s)
		}
	}
}

// TestCLIDumpRefusesImageDir: a dump into a directory that already holds
// an image refuses, naming the directory and its image; the image stays
// as it was and the process keeps running, untraced.
func TestCLIDumpRefusesImageDir(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "dynamic_counter")
	img := filepath.Join(t.TempDir(), "img")
	e.dump(t, v.pid, img, "--leave-running")
	h := fileHash(t, filepath.Join(img, "image.ckpt"))
	for _, flags := range [][]string{{"--leave-running"}, nil} {
		args := append(append([]string{"dump", "--dir", img}, flags...), strconv.Itoa(v.pid))
		res := e.runCkpt(t, nil, args...)
		if res.code == 0 || !strings.Contains(res.stderr, img+" already holds an image") ||
			!strings.Contains(res.stderr, filepath.Join(img, "image.ckpt")) {
			t.Errorf("ckpt %s: %v; want a refusal naming %s and its image.ckpt", strings.Join(args, " "), res, img)
		}
		if got := fileHash(t, filepath.Join(img, "image.ckpt")); got != h {
			t.Errorf("the image in %s changed", img)
		}
		if _, err := os.Stat(filepath.Join(img, "image.ckpt.partial")); err == nil {
			t.Errorf("a refused dump left image.ckpt.partial in %s", img)
		}
		e.expectAlive(t, v, "after a refused dump")
		if tp := statusField(v.pid, "TracerPid"); tp != "0" {
			t.Errorf("after a refused dump: TracerPid %s", tp)
		}
	}
	v.check(t)
	e.bye(t, v)
}

// TestCLIFailedDumpRemovesDir: a dump that fails removes the directories
// it created for the image, and only those.
func TestCLIFailedDumpRemovesDir(t *testing.T) {
	e := setup(t)
	tests := []struct {
		name   string
		dir    string // image directory under a fresh temporary directory
		exists string // created before the dump ("" for none)
		gone   string // must not exist after the failed dump
	}{
		{"new", "img", "", "img"},
		{"new nested", "a/b/img", "", "a"},
		{"parent exists", "a/img", "a", "a/img"},
		{"exists", "img", "img", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.exists != "" {
				if err := os.MkdirAll(filepath.Join(root, tc.exists), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(root, tc.dir)
			pid := freePID(t)
			res := e.runCkpt(t, nil, "dump", "--dir", dir, strconv.Itoa(pid))
			if res.code == 0 {
				t.Fatalf("ckpt dump of the free pid %d: %v, want a failure", pid, res)
			}
			if tc.gone != "" {
				if _, err := os.Stat(filepath.Join(root, tc.gone)); err == nil {
					t.Errorf("after a failed dump, %s exists", tc.gone)
				}
			}
			if tc.exists != "" {
				ents, err := os.ReadDir(filepath.Join(root, tc.exists))
				if err != nil || (tc.exists == tc.dir && len(ents) != 0) {
					t.Errorf("after a failed dump, %s: %v, %v; want it there as before", tc.exists, ents, err)
				}
			}
		})
	}
}

// TestCLIKilledDump: a dump killed midway leaves image.ckpt.partial and a
// process that goes on; ckpt show and ckpt-redo say that the image is
// incomplete; a later dump into the directory removes the stale partial
// image, says so, and writes an image that restores.
func TestCLIKilledDump(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "dynamic_counter")
	img := filepath.Join(t.TempDir(), "img")
	res := e.runCkpt(t, []string{"CKPT_FAULT=memory"}, "dump", "--dir", img, strconv.Itoa(v.pid))
	if res.signal != int(syscall.SIGKILL) {
		t.Fatalf("ckpt dump with CKPT_FAULT=memory: %v, want killed by SIGKILL", res)
	}
	if _, err := os.Stat(filepath.Join(img, "image.ckpt.partial")); err != nil {
		t.Fatalf("a killed dump left no partial image: %v", err)
	}
	noImage(t, img)
	e.expectAlive(t, v, "after a killed dump")

	const incomplete = "incomplete image (the dump did not finish)"
	if res := e.runCkpt(t, nil, "show", img); res.code == 0 || !strings.Contains(res.stderr, incomplete) {
		t.Errorf("ckpt show %s: %v; want %q", img, res, incomplete)
	}
	if res := e.runRedo(t, nil, img); res.code == 0 || !strings.Contains(res.stderr, incomplete) {
		t.Errorf("ckpt-redo %s: %v; want %q", img, res, incomplete)
	}

	res = e.runCkpt(t, nil, "dump", "--json", "--dir", img, strconv.Itoa(v.pid))
	if res.code != 0 || !strings.Contains(res.stderr, "removed the partial image a dump that did not finish left in "+img) {
		t.Fatalf("ckpt dump into %s: %v; want success and a word about the stale partial image", img, res)
	}
	if _, err := os.Stat(filepath.Join(img, "image.ckpt.partial")); err == nil {
		t.Errorf("image.ckpt.partial is still there after a dump that succeeded")
	}
	if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
		t.Fatalf("after the dump: %v, want killed by SIGKILL", es)
	}
	e.restore(t, v, img)
	v.check(t)
	e.bye(t, v)
}

// TestCLIFinalLines: the last lines of dump and restore give sizes and
// rates in one unit, MiB and MiB/s.
func TestCLIFinalLines(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "dynamic_counter")
	img := filepath.Join(t.TempDir(), "img")
	res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(v.pid))
	if res.code != 0 {
		t.Fatalf("ckpt dump: %v", res)
	}
	if es := e.r.WaitExit(t, v.pid, wait); es.Signal != int(syscall.SIGKILL) {
		t.Fatalf("after the dump: %v, want killed by SIGKILL", es)
	}
	redo := e.runRedoArgv(t, []string{e.redo(), img})
	if redo.code != 0 {
		t.Fatalf("ckpt-redo: %v", redo)
	}
	units := regexp.MustCompile(`[0-9.]+ MiB at [0-9]+ MiB/s`)
	for _, line := range []string{res.stdout, redo.stdout} {
		if !units.MatchString(line) || strings.Contains(line, "MB/s") {
			t.Errorf("final line %q: want sizes in MiB and rates in MiB/s only", line)
		}
	}
	v.waitNewTicks(t, 3)
	e.bye(t, v)
}

// TestCLIDemo runs scripts/demo.sh (what `make demo` runs) with the
// commands built for the tests: it must succeed, and print no line a user
// would take for an error (the shell's "Killed" for the dumped process).
func TestCLIDemo(t *testing.T) {
	e := setup(t)
	cmd := exec.Command(filepath.Join(e.bin, "ckpt-reaper"), "exec", "--", "bash", "scripts/demo.sh")
	cmd.Dir = testenv.RepoRoot(t)
	cmd.Env = append(os.Environ(), "CKPT_BIN="+e.bin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v:\n%s", err, out.String())
	}
	s := out.String()
	if !strings.Contains(s, "demo OK") {
		t.Errorf("demo output has no \"demo OK\":\n%s", s)
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "Killed") || strings.Contains(l, "FAIL") {
			t.Errorf("demo prints %q", l)
		}
	}
}

// TestCLICheck: ckpt check prints the probes dump and restore run, every
// one ok on the test machines, with who needs each; no soft-dirty line
// (ckpt does not track writes). --json gives the same.
func TestCLICheck(t *testing.T) {
	e := setup(t)
	res := e.runCkpt(t, nil, "check")
	if res.code != 0 {
		t.Fatalf("ckpt check: %v", res)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "ok ") || strings.Contains(l, "soft-dirty") || strings.Contains(l, "write-protect") {
			t.Errorf("ckpt check: line %q", l)
		}
	}
	for _, want := range []string{"clone3 set_tid", "kcmp", "PR_SET_MM_MAP", "TCP_REPAIR"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("ckpt check does not probe %s:\n%s", want, res.stdout)
		}
	}
	res = e.runCkpt(t, nil, "check", "--json")
	var probes []struct {
		Name     string `json:"name"`
		OK       bool   `json:"ok"`
		Required bool   `json:"required"`
		NeededBy string `json:"needed_by"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &probes); err != nil || res.code != 0 || len(probes) != len(lines) {
		t.Fatalf("ckpt check --json: %v (%v); want %d probes", res, err, len(lines))
	}
	for _, p := range probes {
		if !p.OK || p.NeededBy == "" {
			t.Errorf("ckpt check --json: %+v", p)
		}
	}
}

// TestCLIMissingFeature: with a system call made to fail with ENOSYS (a
// seccomp filter, as a kernel without it would answer), a dump and a
// restore name the missing feature before they touch anything: the
// process goes on, no image directory is left, nothing is restored; the
// same image restores without the filter.
func TestCLIMissingFeature(t *testing.T) {
	e := setup(t)
	nosys := compileC(t, "nosys.c")
	const sysKcmp = 312 // x86-64
	v := e.startVictim(t, "dynamic_counter")
	img := filepath.Join(t.TempDir(), "img")

	res := e.runRedoArgv(t, []string{nosys, strconv.Itoa(sysKcmp), e.ckpt(), "dump", "--dir", img, strconv.Itoa(v.pid)})
	if want := "kcmp: not supported by this kernel"; res.code != 1 || !strings.Contains(res.stderr, want) {
		t.Errorf("ckpt dump without kcmp: %v; want %q", res, want)
	}
	if _, err := os.Stat(img); err == nil {
		t.Errorf("a dump that found a feature missing left %s", img)
	}
	e.expectAlive(t, v, "after a dump that found kcmp missing")
	if tp := statusField(v.pid, "TracerPid"); tp != "0" {
		t.Errorf("after a dump that found kcmp missing: TracerPid %s", tp)
	}

	e.dumpKill(t, v, img)
	const sysClone3 = 435 // x86-64
	res = e.runRedoArgv(t, []string{nosys, strconv.Itoa(sysClone3), e.redo(), img})
	if want := "clone3 set_tid: not supported by this kernel"; res.code != 1 || !strings.Contains(res.stderr, want) {
		t.Errorf("ckpt-redo without clone3: %v; want %q", res, want)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", v.pid)); err == nil {
		t.Errorf("pid %d exists after a restore that found clone3 missing", v.pid)
	}
	e.restore(t, v, img)
	v.check(t)
	e.bye(t, v)
}

// TestCLIMissingTCPRepair: TCP connections need TCP_REPAIR to be dumped
// and restored; with setsockopt failing (ENOSYS, a seccomp filter), ckpt
// dump names the feature, the process and the fd before it reads any
// state, and the server goes on unlocked; ckpt-redo of an image with TCP
// connections names the feature, the process and the connection before it
// builds anything, and the dump's network lock stays for a retry, which
// succeeds without the filter: the clients see every answer.
func TestCLIMissingTCPRepair(t *testing.T) {
	e := setup(t)
	nosys := compileC(t, "nosys.c")
	const sysSetsockopt = 54 // x86-64
	j := e.startTCP(t, 1, 2)
	img := filepath.Join(t.TempDir(), "img")

	// The dump names the feature, the process and the fd, and lets the
	// server go on.
	res := e.runRedoArgv(t, []string{nosys, strconv.Itoa(sysSetsockopt), e.ckpt(), "dump", "--dir", img, strconv.Itoa(j.server.pid)})
	want := fmt.Sprintf("process %d fd ", j.server.pid)
	if res.code != 1 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "TCP connection: TCP_REPAIR: not supported by this kernel") {
		t.Errorf("ckpt dump without setsockopt: %v; want %q and TCP_REPAIR named", res, want)
	}
	if ts := lockTables(t, j.server.pid); len(ts) != 0 {
		t.Errorf("after the refused dump, lock tables %v, want none", ts)
	}
	if es, ok := e.r.Poll(j.server.pid); ok || statusField(j.server.pid, "TracerPid") != "0" {
		t.Errorf("after a dump that found TCP_REPAIR missing: server %v, TracerPid %q; want it running untraced", es, statusField(j.server.pid, "TracerPid"))
	}

	e.dumpKill(t, j.server, img)
	res = e.runRedoArgv(t, []string{nosys, strconv.Itoa(sysSetsockopt), e.redo(), img})
	want = fmt.Sprintf("restore %d: TCP connection 127.0.0.1:", j.server.pid)
	if res.code != 1 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "TCP_REPAIR: not supported by this kernel") {
		t.Errorf("ckpt-redo without setsockopt: %v; want %q and TCP_REPAIR named", res, want)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", j.server.pid)); err == nil {
		t.Errorf("pid %d exists after a restore that found TCP_REPAIR missing", j.server.pid)
	}
	if ts := lockTables(t, j.server.pid); len(ts) != 1 {
		t.Errorf("after the refused restore, lock tables %v, want the dump's one", ts)
	}
	e.restoreServer(t, j.server, img)
	waitNoLock(t, j.server.pid, "after the restore")
	e.finish(t, j)
	e.killAndReap(t, j.server)
}

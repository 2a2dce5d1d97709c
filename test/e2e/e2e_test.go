// Package e2e holds end-to-end tests of ckpt: real victims (testdata/victims
// of the repository, test/e2e/testdata) run under a reaper, are dumped with
// `ckpt dump`, restored with `ckpt-redo` run through the reaper, and check
// themselves from the inside (tick logs, "check ok" on SIGUSR1).
package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ckpt/ckpt/internal/testenv"
)

// tickFormat is the exact form of each victim's tick lines.
var tickFormat = map[string]*regexp.Regexp{
	"static_counter":  regexp.MustCompile(`^tick \d+ sum=[0-9a-f]{16}$`),
	"dynamic_counter": regexp.MustCompile(`^tick \d+ sum=[0-9a-f]{16} mono=\d+\.\d{9}$`),
	"filemap":         regexp.MustCompile(`^tick \d+ off=\d+$`),
	"vector":          regexp.MustCompile(`^tick \d+ burst_ms=\d+\.\d$`),
	"pyheap":          regexp.MustCompile(`^tick \d+$`),
	"ghost":           regexp.MustCompile(`^tick \d+$`),
}

var otherLine = regexp.MustCompile(`^(start pid=\d+( .*)?|check ok \d+|bye \d+)$`)

// checkLogFile checks a victim's whole log file, byte by byte: no NUL bytes
// (holes left by a file offset that moved forward), every line in one of
// the victim's forms (an overwritten or torn line breaks them), one start
// line, checks lines that are all "check ok", and a final newline.
func checkLogFile(t *testing.T, v *victim, wantChecks int) {
	t.Helper()
	b, err := os.ReadFile(v.log)
	if err != nil {
		t.Fatal(err)
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		t.Errorf("%s: log has a NUL byte at offset %d of %d (a hole: the file offset skipped forward)", v.name, i, len(b))
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Errorf("%s: log does not end with a newline", v.name)
	}
	starts, checks := 0, 0
	for i, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		switch {
		case tickFormat[v.name].MatchString(l):
		case otherLine.MatchString(l):
			if strings.HasPrefix(l, "start ") {
				starts++
			}
			if strings.HasPrefix(l, "check ") {
				checks++
			}
		default:
			t.Errorf("%s: log line %d is malformed (overwritten or torn?): %q", v.name, i+1, l)
		}
	}
	if starts != 1 {
		t.Errorf("%s: %d start lines, want 1", v.name, starts)
	}
	if checks != wantChecks {
		t.Errorf("%s: %d check lines, want %d", v.name, checks, wantChecks)
	}
	if s := readFile(v.stderr); s != "" {
		t.Errorf("%s: stderr is not empty: %q", v.name, s)
	}
}

// TestDumpRestoreCycles runs every victim through two dump+restore cycles
// in a row; each restore must give the same process back (PID, comm, exe,
// cmdline, parent), ticking on from where it was dumped. Then the victim
// checks all its state (memory, registers, TLS, files, the pipe of
// dynamic_counter with its buffered bytes, signal setup) and exits 0, and
// its log must count ticks with no gap, repeat or damage.
func TestDumpRestoreCycles(t *testing.T) {
	e := setup(t)
	tests := []struct {
		name string
		args []string
	}{
		{"static_counter", nil},
		{"dynamic_counter", nil},
		{"filemap", []string{"DIR/data"}},
		{"vector", nil},
		{"pyheap", []string{"32"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := e.startVictim(t, tc.name, tc.args...)
			v.waitTick(t, 3)
			for cycle := 1; cycle <= 2; cycle++ {
				img := filepath.Join(t.TempDir(), "img")
				before := lastTick(v.lines())
				e.dumpKill(t, v, img)
				e.restore(t, v, img)
				if lines := v.lines(); lastTick(lines) <= before {
					t.Fatalf("cycle %d: no tick after restore", cycle)
				}
			}
			v.check(t)
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
			checkLogFile(t, v, 1)
		})
	}
}

// TestLeaveRunning dumps with --leave-running: the original goes on; once
// it is killed, the image restores the process as it was at the dump, so
// its ticks restart right after the checkpoint.
func TestLeaveRunning(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "dynamic_counter")
	v.waitTick(t, 3)
	kPre := lastTick(v.lines()) // the counter at the dump is at least this
	img := filepath.Join(t.TempDir(), "img")
	dr := e.dump(t, v.pid, img, "--leave-running")
	kPost := lastTick(v.lines()) // ... and at most this
	if dr.Killed {
		t.Errorf("dump --leave-running: result says killed=true")
	}
	if _, err := os.Stat(filepath.Join(img, "image.ckpt")); err != nil {
		t.Fatalf("dump --leave-running: %v", err)
	}
	// The original is the same process, untraced, and goes on.
	if c := comm(v.pid); c != v.comm {
		t.Fatalf("after dump --leave-running: pid %d comm %q, want %q", v.pid, c, v.comm)
	}
	v.waitNewTicks(t, 3)
	if tp := statusField(v.pid, "TracerPid"); tp != "0" {
		t.Errorf("after dump --leave-running: TracerPid %s, want 0", tp)
	}
	v.check(t)
	e.killAndReap(t, v)

	orig := v.lines()
	lastOrig := lastTick(orig)
	if lastOrig < kPost+3 {
		t.Fatalf("the original wrote up to tick %d, want at least %d", lastOrig, kPost+3)
	}
	testenv.CheckTicks(t, orig)
	e.restore(t, v, img)
	v.check(t)
	lines := e.bye(t, v)
	restored := lines[len(orig):]
	first := -1
	for i, l := range restored {
		if strings.Contains(l, "FAIL") {
			t.Errorf("restored log line %d: %s", i+1, l)
		}
		n, ok := tickOf(l)
		if !ok {
			continue
		}
		if first < 0 {
			first = n
			// The checkpoint counter K is in [kPre, kPost]: the restored
			// process goes on with K+1.
			if n < kPre+1 || n > kPost+1 {
				t.Errorf("first tick after restore is %d, want the checkpoint's counter + 1, in [%d, %d]", n, kPre+1, kPost+1)
			}
			if n > lastOrig {
				t.Errorf("first tick after restore %d is past the original's last tick %d", n, lastOrig)
			}
		} else if n != first+1 {
			t.Errorf("restored log line %d: tick %d follows tick %d", i+1, n, first)
		} else {
			first = n
		}
	}
	if first < 0 {
		t.Errorf("no tick after restore")
	}
}

// TestPendingSignal dumps a process with a blocked SIGHUP pending: after
// restore it is still pending (and still blocked: were the mask lost, SIGHUP
// would kill the victim), and the handlers still work.
func TestPendingSignal(t *testing.T) {
	e := setup(t)
	for _, name := range []string{"static_counter", "dynamic_counter"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := e.startVictim(t, name)
			v.waitTick(t, 2)
			e.r.MustSignal(t, v.pid, syscall.SIGHUP)
			if p := statusField(v.pid, "ShdPnd"); !sigBit(p, syscall.SIGHUP) {
				t.Fatalf("before the dump: ShdPnd %s has no SIGHUP", p)
			}
			img := filepath.Join(t.TempDir(), "img")
			e.dumpKill(t, v, img)
			e.restore(t, v, img)
			shd, sig, blk := statusField(v.pid, "ShdPnd"), statusField(v.pid, "SigPnd"), statusField(v.pid, "SigBlk")
			if !sigBit(shd, syscall.SIGHUP) && !sigBit(sig, syscall.SIGHUP) {
				t.Errorf("after restore: SIGHUP is not pending: ShdPnd %s SigPnd %s", shd, sig)
			}
			if !sigBit(blk, syscall.SIGHUP) {
				t.Errorf("after restore: SigBlk %s has no SIGHUP", blk)
			}
			v.check(t)
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
		})
	}
}

// TestDumpErrors: dumps that must be refused, with a message saying why,
// leaving no image behind.
func TestDumpErrors(t *testing.T) {
	e := setup(t)
	// A zombie: sleep 0.1 exits and its parent (sh exec'd into sleep 30)
	// never waits for it.
	d := t.TempDir()
	parent := e.r.Run(t, testenv.RunOpts{Dir: d}, "/bin/sh", "-c", "sleep 0.1 & exec sleep 30")
	zombie := waitZombieChild(t, parent)

	tests := []struct {
		name string
		pid  int
		want string
	}{
		{"no such process", freePID(t), "no such process"},
		{"kernel thread", 2, "kernel thread"},
		{"zombie", zombie, "zombie"},
		{"pid 0", 0, "not a PID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			res := e.runCkpt(t, nil, "dump", "--dir", img, strconv.Itoa(tc.pid))
			if res.code <= 0 {
				t.Fatalf("ckpt dump %d: %v, want a non-zero exit code", tc.pid, res)
			}
			if !strings.Contains(res.stderr, tc.want) {
				t.Errorf("ckpt dump %d: stderr %q, want it to say %q", tc.pid, res.stderr, tc.want)
			}
			noImage(t, img)
			if _, err := os.Stat(filepath.Join(img, "image.ckpt.partial")); err == nil {
				t.Errorf("a refused dump left image.ckpt.partial behind")
			}
		})
	}
	// The refused dumps left the parent alone.
	if st := procState(parent); st != "S" {
		t.Errorf("sleep %d: state %q after the refused dump, want S", parent, st)
	}
	if tp := statusField(parent, "TracerPid"); tp != "0" {
		t.Errorf("sleep %d: TracerPid %s after the refused dump, want 0", parent, tp)
	}
}

// waitZombieChild waits for pid's only child to be a zombie and returns it.
func waitZombieChild(t *testing.T, pid int) int {
	t.Helper()
	for i := 0; i < 500; i++ {
		kids := strings.Fields(readFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)))
		if len(kids) == 1 {
			k, _ := strconv.Atoi(kids[0])
			if procState(k) == "Z" {
				return k
			}
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 20e6}, nil)
	}
	t.Fatalf("pid %d got no zombie child", pid)
	return 0
}

// TestRestoreBadImage: restores from what is not a good image must fail
// with a message saying what is wrong, leave no process behind and leave
// the image as it was; the good image still restores afterwards.
func TestRestoreBadImage(t *testing.T) {
	e := setup(t)

	t.Run("not an image", func(t *testing.T) {
		empty := t.TempDir()
		garbage := t.TempDir()
		os.WriteFile(filepath.Join(garbage, "image.ckpt"), []byte(strings.Repeat("this is not an image\n", 300)), 0o600)
		partial := t.TempDir()
		os.WriteFile(filepath.Join(partial, "image.ckpt.partial"), []byte("CKPTIMG\x00"), 0o600)
		for _, tc := range []struct{ name, dir, want string }{
			{"empty dir", empty, "no ckpt image"},
			{"missing dir", filepath.Join(empty, "nothing"), "no such file or directory"},
			{"garbage", garbage, "not a ckpt image"},
			{"only a partial image", partial, "incomplete image (the dump did not finish)"},
		} {
			res := e.runRedo(t, nil, tc.dir)
			if res.code <= 0 {
				t.Errorf("%s: ckpt-redo %s: %v, want a non-zero exit code", tc.name, tc.dir, res)
			} else if !strings.Contains(res.stderr, tc.want) {
				t.Errorf("%s: ckpt-redo %s: stderr %q, want it to say %q", tc.name, tc.dir, res.stderr, tc.want)
			}
		}
	})

	v := e.startVictim(t, "static_counter")
	v.waitTick(t, 3)
	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	good := fileHash(t, filepath.Join(img, "image.ckpt"))
	size, endOff, procMeta := imageLayout(t, filepath.Join(img, "image.ckpt"))

	flip := func(off int64) func([]byte) []byte {
		return func(b []byte) []byte { b[off] ^= 0x40; return b }
	}
	cut := func(n int64) func([]byte) []byte {
		return func(b []byte) []byte { return b[:n] }
	}
	tests := []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"truncated to half", cut(size / 2), "truncated"},
		{"end record cut off", cut(endOff), "truncated"},
		{"last byte cut off", cut(size - 1), "truncated"},
		{"byte flipped in the middle", flip(size / 2), "corrupt"},
		{"byte flipped in the process record", flip(procMeta), "corrupt"},
		{"byte flipped in the end record", flip(endOff + 40), "corrupt"},
		{"other format version", func(b []byte) []byte { b[8] = 1; return b }, "format version 1, this ckpt reads version 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := copyImage(t, img, tc.edit)
			badHash := fileHash(t, filepath.Join(bad, "image.ckpt"))
			res := e.runRedo(t, nil, bad)
			if res.code <= 0 {
				t.Errorf("ckpt-redo of an image %s: %v, want a non-zero exit code", tc.name, res)
			} else if !strings.Contains(res.stderr, tc.want) {
				t.Errorf("ckpt-redo of an image %s: stderr %q, want it to say %q", tc.name, res.stderr, tc.want)
			}
			e.expectGone(t, v.pid, "after a failed restore")
			e.waitNoChildren(t, "after a failed restore")
			if h := fileHash(t, filepath.Join(bad, "image.ckpt")); h != badHash {
				t.Errorf("the failed restore changed the image")
			}
		})
	}
	if h := fileHash(t, filepath.Join(img, "image.ckpt")); h != good {
		t.Fatalf("the good image changed")
	}
	// Nothing was left behind: the good image restores.
	e.restore(t, v, img)
	v.check(t)
	lines := e.bye(t, v)
	testenv.CheckTicks(t, lines)
	checkLogFile(t, v, 1)
}

// imageLayout walks the records of an image file (format of pkg/image, read
// here independently) and returns the file size, the offset of the end
// record and an offset in the middle of the first process record's metadata.
func imageLayout(t *testing.T, path string) (size, endOff, procMeta int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := func(o int64, n int) uint64 {
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[o+int64(i)])
		}
		return v
	}
	if string(b[:8]) != "CKPTIMG\x00" {
		t.Fatalf("%s: bad magic %q", path, b[:8])
	}
	size = int64(len(b))
	for off := int64(16); off+32 <= size; {
		typ, metaLen, dataLen := le(off, 4), int64(le(off+8, 8)), int64(le(off+16, 8))
		if typ == 2 && procMeta == 0 {
			procMeta = off + 32 + metaLen/2
		}
		if typ == 0x7fffffff {
			endOff = off
			break
		}
		next := off + 32 + metaLen
		if dataLen > 0 {
			next += (4096 - next%4096) % 4096
			next += dataLen
		}
		off = next
	}
	if endOff == 0 || procMeta == 0 || endOff+32 >= size {
		t.Fatalf("%s: no end or process record found (size %d, end %d, process meta %d)", path, size, endOff, procMeta)
	}
	return size, endOff, procMeta
}

// TestRestorePIDInUse: a restore while the dumped process still runs
// (dumped with --leave-running) must fail saying the PID is in use, and
// leave the original alone.
func TestRestorePIDInUse(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "static_counter")
	v.waitTick(t, 3)
	img := filepath.Join(t.TempDir(), "img")
	e.dump(t, v.pid, img, "--leave-running")
	res := e.runRedo(t, nil, img)
	if res.code <= 0 {
		t.Fatalf("ckpt-redo while pid %d runs: %v, want a non-zero exit code", v.pid, res)
	}
	if !strings.Contains(res.stderr, "pid in use") || !strings.Contains(res.stderr, strconv.Itoa(v.pid)) {
		t.Errorf("ckpt-redo while pid %d runs: stderr %q, want it to say pid %d is in use", v.pid, res.stderr, v.pid)
	}
	if _, ok := e.r.Poll(v.pid); ok {
		t.Errorf("the original process %d exited", v.pid)
	}
	if c := comm(v.pid); c != v.comm {
		t.Fatalf("pid %d: comm %q, want %q", v.pid, c, v.comm)
	}
	v.waitNewTicks(t, 3)
	if tp := statusField(v.pid, "TracerPid"); tp != "0" {
		t.Errorf("the original: TracerPid %s, want 0", tp)
	}
	v.check(t)
	lines := e.bye(t, v)
	testenv.CheckTicks(t, lines)
	checkLogFile(t, v, 1)
}

// TestDumpFault kills ckpt (CKPT_FAULT) at every dump phase: the victim
// must go on untouched, with no image committed (but for "committed", where
// the image is complete and the victim was not killed yet); a later dump
// and restore of it still work.
func TestDumpFault(t *testing.T) {
	e := setup(t)
	for _, phase := range []string{"frozen", "injected", "collected", "memory", "written", "committed"} {
		t.Run(phase, func(t *testing.T) {
			t.Parallel()
			v := e.startVictim(t, "static_counter")
			v.waitTick(t, 3)
			img := filepath.Join(t.TempDir(), "img")
			res := e.runCkpt(t, []string{"CKPT_FAULT=" + phase}, "dump", "--dir", img, strconv.Itoa(v.pid))
			if res.signal != int(syscall.SIGKILL) {
				t.Fatalf("ckpt dump with CKPT_FAULT=%s: %v, want killed by SIGKILL", phase, res)
			}
			e.expectAlive(t, v, "after ckpt dump died at "+phase)
			if tp := statusField(v.pid, "TracerPid"); tp != "0" {
				t.Errorf("TracerPid %s after ckpt died, want 0", tp)
			}
			if c := comm(v.pid); c != v.comm {
				t.Errorf("comm %q, want %q", c, v.comm)
			}
			if phase == "committed" {
				if res := e.runCkpt(t, nil, "show", img); res.code != 0 {
					t.Errorf("ckpt show of the image committed before the fault: %v", res)
				}
			} else {
				noImage(t, img)
				// What the dead dump left is not taken for an image.
				res := e.runRedo(t, nil, img)
				if res.code <= 0 || !strings.Contains(res.stderr, "incomplete image (the dump did not finish)") {
					t.Errorf("ckpt-redo of the dump that died at %s: %v, want a failure saying the image is incomplete", phase, res)
				}
			}
			v.check(t)
			// The process holds nothing from the dump that died: a new dump
			// and restore work.
			img2 := filepath.Join(t.TempDir(), "img")
			e.dumpKill(t, v, img2)
			e.restore(t, v, img2)
			v.check(t)
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
			checkLogFile(t, v, 2)
		})
	}
}

// TestRestoreFault kills ckpt-redo (CKPT_FAULT) at every restore phase: no
// process may be left with the victim's PID (nor any other process of the
// restore), the image must be unchanged, and a retry without the fault
// restores the victim. The phases run one after the other, so that the
// reaper has no other child.
func TestRestoreFault(t *testing.T) {
	e := setup(t)
	for _, phase := range []string{"checked", "created", "memory", "built"} {
		t.Run(phase, func(t *testing.T) {
			v := e.startVictim(t, "static_counter")
			v.waitTick(t, 3)
			img := filepath.Join(t.TempDir(), "img")
			e.dumpKill(t, v, img)
			h := fileHash(t, filepath.Join(img, "image.ckpt"))
			res := e.runRedo(t, []string{"CKPT_FAULT=" + phase}, img)
			if res.signal != int(syscall.SIGKILL) {
				t.Fatalf("ckpt-redo with CKPT_FAULT=%s: %v, want killed by SIGKILL", phase, res)
			}
			e.expectGone(t, v.pid, "after ckpt-redo died at "+phase)
			e.waitNoChildren(t, "after ckpt-redo died at "+phase)
			if got := fileHash(t, filepath.Join(img, "image.ckpt")); got != h {
				t.Errorf("the image changed")
			}
			e.restore(t, v, img)
			v.check(t)
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
			checkLogFile(t, v, 1)
		})
	}
}

// showSummary is the part of `ckpt show --json` the tests look at.
type showSummary struct {
	Header struct {
		Root    int    `json:"root"`
		Machine string `json:"machine"`
	} `json:"header"`
	Processes []struct {
		PID   int    `json:"pid"`
		Comm  string `json:"comm"`
		Exe   string `json:"exe"`
		Files []struct {
			ID   int    `json:"id"`
			Kind string `json:"kind"`
			Ref  struct {
				Path string `json:"path"`
			} `json:"ref"`
			Pipe *struct {
				Ino      uint64 `json:"ino"`
				Write    bool   `json:"write"`
				External bool   `json:"external"`
				DataID   int    `json:"data_id"`
			} `json:"pipe"`
		} `json:"files"`
		FDs []struct {
			FD   int `json:"fd"`
			File int `json:"file"`
		} `json:"fds"`
	} `json:"processes"`
	Records int   `json:"records"`
	Pages   int64 `json:"pages"`
}

// TestImageFiles checks the image directory's modes, what `ckpt show`
// tells about the image, and `ckpt check`.
func TestImageFiles(t *testing.T) {
	e := setup(t)
	v := e.startVictim(t, "dynamic_counter")
	v.waitTick(t, 3)
	img := filepath.Join(t.TempDir(), "new", "img")
	e.dumpKill(t, v, img)

	for path, want := range map[string]os.FileMode{img: 0o700 | os.ModeDir, filepath.Join(img, "image.ckpt"): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, st.Mode(), want)
		}
	}
	ents, _ := os.ReadDir(img)
	for _, ent := range ents {
		if ent.Name() != "image.ckpt" {
			t.Errorf("image directory holds %s besides image.ckpt", ent.Name())
		}
	}

	res := e.runCkpt(t, nil, "show", "--json", img)
	if res.code != 0 {
		t.Fatalf("ckpt show --json: %v", res)
	}
	var s showSummary
	if err := json.Unmarshal([]byte(res.stdout), &s); err != nil {
		t.Fatalf("ckpt show --json: %v in %q", err, res.stdout)
	}
	if len(s.Processes) != 1 {
		t.Fatalf("ckpt show --json: %d processes, want 1", len(s.Processes))
	}
	p := s.Processes[0]
	if s.Header.Root != v.pid || p.PID != v.pid || p.Comm != v.comm || p.Exe != v.exe {
		t.Errorf("ckpt show --json: root %d, pid %d, comm %q, exe %q; want %d, %q, %q",
			s.Header.Root, p.PID, p.Comm, p.Exe, v.pid, v.comm, v.exe)
	}
	if s.Records < 4 || s.Pages <= 0 {
		t.Errorf("ckpt show --json: %d records, %d pages", s.Records, s.Pages)
	}
	paths := map[string]bool{}
	type end struct {
		read, write, external bool
		data                  int
	}
	pipes := map[uint64]*end{}
	for _, fd := range p.FDs {
		if fd.File < 0 || fd.File >= len(p.Files) {
			t.Errorf("fd %d names file %d of %d", fd.FD, fd.File, len(p.Files))
			continue
		}
		f := p.Files[fd.File]
		paths[f.Ref.Path] = true
		if f.Pipe != nil {
			pe := pipes[f.Pipe.Ino]
			if pe == nil {
				pe = &end{}
				pipes[f.Pipe.Ino] = pe
			}
			if f.Pipe.Write {
				pe.write = true
			} else {
				pe.read = true
			}
			pe.external = pe.external || f.Pipe.External
			pe.data = max(pe.data, f.Pipe.DataID)
		}
	}
	for _, want := range []string{v.log, v.stderr} {
		if !paths[want] {
			t.Errorf("ckpt show --json: no fd of file %s among %v", want, paths)
		}
	}
	// dynamic_counter's own pipe: both ends in the dump, 3 bytes buffered.
	if len(pipes) != 1 {
		t.Errorf("ckpt show --json: %d pipes, want 1", len(pipes))
	}
	for ino, pe := range pipes {
		if !pe.read || !pe.write || pe.external || pe.data == 0 {
			t.Errorf("pipe %d: %+v, want both ends, internal, with buffered data", ino, *pe)
		}
	}
	res = e.runCkpt(t, nil, "show", img)
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("process %d (%s)", v.pid, v.comm)) {
		t.Errorf("ckpt show: %v, want it to name process %d (%s)", res, v.pid, v.comm)
	}

	// The image, shown, still restores.
	e.restore(t, v, img)
	v.check(t)
	testenv.CheckTicks(t, e.bye(t, v))

	res = e.runCkpt(t, nil, "check")
	if res.code != 0 {
		t.Errorf("ckpt check: %v", res)
	}
	res = e.runCkpt(t, nil, "check", "--json")
	var checks []map[string]any
	if res.code != 0 || json.Unmarshal([]byte(res.stdout), &checks) != nil || len(checks) == 0 {
		t.Errorf("ckpt check --json: %v", res)
	}
}

// TestDeletedFile restores a process whose file was unlinked while it
// holds it open and mapped: the content must come back through both.
func TestDeletedFile(t *testing.T) {
	e := setup(t)
	bin := compileC(t, "ghost.c")
	for _, mode := range []string{"private", "shared"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			v := &victim{name: "ghost", dir: dir, log: filepath.Join(dir, "log"), stderr: filepath.Join(dir, "stderr")}
			argv := []string{bin, v.log, dir}
			if mode == "shared" {
				argv = append(argv, "shared")
			}
			e.startArgv(t, v, argv)
			v.waitTick(t, 3)
			v.check(t) // the victim's own check holds before any dump
			for cycle := 1; cycle <= 2; cycle++ {
				img := filepath.Join(t.TempDir(), "img")
				e.dumpKill(t, v, img)
				e.restore(t, v, img)
				v.check(t)
			}
			lines := e.bye(t, v)
			testenv.CheckTicks(t, lines)
			checkLogFile(t, v, 3)
		})
	}
}

// TestFileChanged restores filemap after its data file changed: the
// restore must refuse, naming the file, and leave nothing behind.
func TestFileChanged(t *testing.T) {
	e := setup(t)
	tests := []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, 512<<10); err != nil {
				t.Fatal(err)
			}
		}},
		{"rewritten in place", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}},
		{"replaced", func(t *testing.T, path string) {
			if err := os.WriteFile(path+".new", make([]byte, 1<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".new", path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := e.startVictim(t, "filemap", "DIR/data")
			v.waitTick(t, 3)
			data := filepath.Join(v.dir, "data")
			img := filepath.Join(t.TempDir(), "img")
			e.dumpKill(t, v, img)
			h := fileHash(t, filepath.Join(img, "image.ckpt"))
			before, _ := os.Stat(data)
			tc.change(t, data)
			if after, _ := os.Stat(data); after.ModTime().Equal(before.ModTime()) && after.Size() == before.Size() {
				// Same size and the clock did not move: make the change visible.
				os.Chtimes(data, before.ModTime().Add(1e9), before.ModTime().Add(1e9))
			}
			res := e.runRedo(t, nil, img)
			if res.code <= 0 {
				t.Fatalf("ckpt-redo after %s %s: %v, want a non-zero exit code", data, tc.name, res)
			}
			if !strings.Contains(res.stderr, data) || !strings.Contains(res.stderr, "changed") {
				t.Errorf("ckpt-redo after %s %s: stderr %q, want it to name the file and say changed", data, tc.name, res.stderr)
			}
			e.expectGone(t, v.pid, "after the refused restore")
			if got := fileHash(t, filepath.Join(img, "image.ckpt")); got != h {
				t.Errorf("the image changed")
			}
		})
	}
}

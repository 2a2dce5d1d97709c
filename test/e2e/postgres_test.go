package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
)

// pgBin finds the PostgreSQL server programs (Debian's layout).
func pgBin(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(dirs) == 0 {
		t.Fatalf("PostgreSQL is not installed (make deps / .ci/run install it)")
	}
	return filepath.Dir(dirs[len(dirs)-1])
}

// psqlSession is a psql client reading commands from a FIFO, its output in
// a file; it runs under the reaper, outside the dumped tree.
type psqlSession struct {
	ctl *os.File
	out string
	pid int
	n   int
}

// run sends sql and waits for its output, which it returns (the lines
// before the marker).
func (s *psqlSession) run(t *testing.T, sql string) []string {
	t.Helper()
	s.n++
	mark := fmt.Sprintf("MARK-%d", s.n)
	if _, err := fmt.Fprintf(s.ctl, "%s\n\\echo %s\n", sql, mark); err != nil {
		t.Fatalf("psql: send: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := testenv.ReadLines(s.out)
		for i, l := range lines {
			if l != mark {
				continue
			}
			start := 0
			for j := i - 1; j >= 0; j-- {
				if strings.HasPrefix(lines[j], "MARK-") {
					start = j + 1
					break
				}
			}
			return lines[start:i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("psql: no output for %q; output:\n%s", sql, readFile(s.out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPostgres checkpoints and restores a PostgreSQL server — postmaster,
// its auxiliary processes and a backend, SysV and anonymous shared
// memory, POSIX semaphores, TCP and UNIX listeners — while a psql client
// over TCP holds its connection with a transaction open: after the
// restore the same backend finishes that transaction and runs more, and
// a fresh connection sees all of them.
func TestPostgres(t *testing.T) {
	bin := pgBin(t)
	e := setup(t)
	base, err := os.MkdirTemp("", "ckpt-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	data := filepath.Join(base, "data")
	for _, d := range []string{base, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(base, 0o755)
	if out, err := exec.Command("chown", "-R", "postgres:postgres", base).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	asPG := []string{"setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"}
	initdb := exec.Command(asPG[0], append(asPG[1:], filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")...)
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := freePort(t)
	v := &victim{name: "postgres", dir: base, log: filepath.Join(base, "log"), stderr: filepath.Join(base, "log")}
	v.pid = e.r.Run(t, testenv.RunOpts{Stdout: v.log, Stderr: v.log, Dir: base}, append(asPG,
		filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", base,
		"-c", "listen_addresses=127.0.0.1", "-c", "huge_pages=off", "-c", "shared_buffers=16MB",
		"-c", "max_connections=10", "-c", "fsync=off", "-c", "logging_collector=off")...)
	t.Cleanup(func() {
		// A fast shutdown removes the SysV segment and the DSM files.
		e.r.Signal(t, v.pid, syscall.SIGINT)
		e.r.WaitExit(t, v.pid, 20*time.Second)
	})
	v.waitLine(t, func(l string) bool { return strings.Contains(l, "ready to accept connections") })
	v.comm, v.exe = comm(v.pid), exeOf(v.pid)

	fifo := filepath.Join(base, "psql.in")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &psqlSession{out: filepath.Join(t.TempDir(), "psql.out")}
	psqlArgs := fmt.Sprintf("-X -A -t -q -h 127.0.0.1 -p %d -U postgres -d postgres", port)
	s.pid = e.r.Run(t, testenv.RunOpts{Stdout: s.out, Stderr: s.out}, "sh", "-c", "exec psql "+psqlArgs+" < "+fifo)
	if s.ctl, err = os.OpenFile(fifo, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	}
	defer s.ctl.Close()
	s.run(t, "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 100) g;")
	backend := s.run(t, "SELECT pg_backend_pid();")
	if got := s.run(t, "BEGIN; INSERT INTO t VALUES (1000, 'in the open transaction'); SELECT count(*) FROM t;"); fmt.Sprint(got) != "[101]" {
		t.Fatalf("count in the transaction: %q", got)
	}
	procs := treeSnapshot(v.pid)

	img := filepath.Join(t.TempDir(), "img")
	e.dumpKill(t, v, img)
	if res := e.runRedo(t, nil, img); res.code != 0 {
		t.Fatalf("ckpt-redo: %v\npostgres log ends with:\n%s", res, tail(v.lines(), 10))
	}
	if after := treeSnapshot(v.pid); len(after) != len(procs) {
		t.Errorf("restored tree:%s\nwant:%s", fmtTree(after), fmtTree(procs))
	}
	if got := s.run(t, "SELECT pg_backend_pid();"); fmt.Sprint(got) != fmt.Sprint(backend) {
		t.Fatalf("backend pid %q after the restore, want %q: the connection was not kept; psql:\n%s\npostgres log:\n%s",
			got, backend, readFile(s.out), tail(v.lines(), 10))
	}
	if got := s.run(t, "INSERT INTO t VALUES (1001, 'after the restore'); COMMIT; SELECT count(*) FROM t;"); fmt.Sprint(got) != "[102]" {
		t.Fatalf("count after commit: %q; postgres log:\n%s", got, tail(v.lines(), 10))
	}
	for i := 0; i < 10; i++ {
		s.run(t, fmt.Sprintf("BEGIN; INSERT INTO t VALUES (%d, 'more'); UPDATE t SET v = v || '+' WHERE id = %d; COMMIT;", 2000+i, 1+i))
	}
	fresh := exec.Command("psql", append(strings.Fields(psqlArgs), "-c",
		"SELECT count(*), sum(length(v)), current_user, (SELECT count(*) FROM pg_roles WHERE rolname = 'postgres') FROM t;")...)
	out, err := fresh.CombinedOutput()
	want := "112|"
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), want) || !strings.HasSuffix(strings.TrimSpace(string(out)), "|postgres|1") {
		t.Fatalf("fresh connection: %v %q, want %s...|postgres|1; postgres log:\n%s", err, out, want, tail(v.lines(), 10))
	}
	for _, l := range v.lines() {
		if strings.Contains(l, "PANIC") || strings.Contains(l, "terminated by signal") || strings.Contains(l, "server process") {
			t.Errorf("postgres log: %s", l)
		}
	}
	s.ctl.Close()
	if st := e.r.WaitExit(t, s.pid, 20*time.Second); st.Code != 0 {
		t.Errorf("psql: %v: %s", st, readFile(s.out))
	}
}

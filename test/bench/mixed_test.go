package bench

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/testenv"
	"golang.org/x/sys/unix"
)

// mixedStates are the server-side TCP states of testdata/mixedconns.py's
// connections, as ss names them, and how many of n are in each.
func mixedStates(n int) map[string]int {
	return map[string]int{"established": n / 2, "fin-wait-2": n / 4, "close-wait": n / 4}
}

// serverStates counts, in network namespace ns, the TCP sockets on local
// port port in each of mixedStates' states.
func serverStates(b *testing.B, ns string, port int) map[string]int {
	b.Helper()
	got := map[string]int{}
	for st := range mixedStates(0) {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "ss", "-Htn", "state", st, "sport", "=", ":"+strconv.Itoa(port)).Output()
		if err != nil {
			b.Fatalf("ss: %v", err)
		}
		got[st] = strings.Count(string(out), "\n")
	}
	return got
}

// BenchmarkConnectionsMixed dumps and restores a server holding N TCP
// connections (N = 0 and 1000) in mixed states (testdata/mixedconns.py:
// a quarter echoed, a quarter with unread bytes queued, a quarter
// half-closed by the server, a quarter half-closed by the client), in a
// network namespace of its own; the difference between the two rows is
// what the connections cost (issue 12: at most 1 s more for the dump and
// for the restore). After each restore the server's sockets are in the
// same states, and at the end the echoed ones still echo and the ones the
// server half-closed read end of file.
func BenchmarkConnectionsMixed(b *testing.B) {
	testenv.RequireRoot(b)
	bin := testenv.BuildBinaries(b)
	script := filepath.Join(testenv.RepoRoot(b), "test", "bench", "testdata", "mixedconns.py")
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("%dconns", n), func(b *testing.B) {
			dir := b.TempDir()
			r := testenv.StartReaper(b)
			ns := benchNetNS(b)
			enter := []string{"nsenter", "--net=/run/netns/" + ns}
			const port = 7413
			log := filepath.Join(dir, "log")
			pid := r.Run(b, testenv.RunOpts{}, append(enter, "python3", script, log, strconv.Itoa(port))...)
			testenv.WaitForLine(b, log, func(l string) bool { return strings.HasPrefix(l, "start") }, time.Minute)
			conns := make([]*net.TCPConn, n)
			for i := range conns {
				if err := testenv.InNetNS(ns, func() error {
					c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
					if err == nil {
						conns[i] = c.(*net.TCPConn)
					}
					return err
				}); err != nil {
					b.Fatal(err)
				}
				defer conns[i].Close()
				switch i % 4 {
				case 1:
					if _, err := conns[i].Write(make([]byte, 1000)); err != nil {
						b.Fatal(err)
					}
				case 3:
					if err := conns[i].CloseWrite(); err != nil {
						b.Fatal(err)
					}
				}
			}
			want := mixedStates(n)
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				got := serverStates(b, ns, port)
				if fmt.Sprint(got) == fmt.Sprint(want) {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("server's connections: %v, want %v", got, want)
				}
			}
			img := filepath.Join(dir, "img")
			var frozen, total, rest []float64
			for i := -1; i < rounds(); i++ {
				dr := dumpJSON(b, bin, img, pid)
				r.WaitExit(b, pid, time.Minute)
				rr := restoreJSONArgv(b, r, dir, append(enter, filepath.Join(bin, "ckpt-redo"), "--json", img)...)
				if got := serverStates(b, ns, port); fmt.Sprint(got) != fmt.Sprint(want) {
					b.Fatalf("round %d: after the restore the server's connections are %v, want %v", i, got, want)
				}
				if i >= 0 {
					frozen = append(frozen, float64(dr.Frozen.Microseconds())/1e3)
					total = append(total, float64(dr.Total.Microseconds())/1e3)
					rest = append(rest, float64(rr.Build.Microseconds())/1e3)
				}
			}
			for i, c := range conns {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				switch i % 4 {
				case 0:
					msg := []byte(fmt.Sprintf("ping %d\n", i))
					got := make([]byte, len(msg))
					if _, err := c.Write(msg); err != nil {
						b.Fatalf("connection %d after restore: %v", i, err)
					}
					if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
						b.Fatalf("connection %d after restore: %q, %v", i, got, err)
					}
				case 2:
					if k, err := c.Read(make([]byte, 1)); k != 0 || err != io.EOF {
						b.Fatalf("connection %d half-closed by the server: read %d, %v, want end of file", i, k, err)
					}
				}
			}
			b.ReportMetric(median(total), "dump-ms")
			b.ReportMetric(median(frozen), "frozen-ms")
			b.ReportMetric(median(rest), "restore-ms")
			unix.Kill(pid, unix.SIGKILL)
		})
	}
}

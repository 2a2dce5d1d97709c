package dump_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
	"github.com/ckpt/ckpt/pkg/dump"
	"golang.org/x/sys/unix"
)

// sigqueue sends sig to pid with rt_sigqueueinfo, si_code SI_QUEUE and
// si_value v, retrying while the process's queue is full.
func sigqueue(pid int, sig unix.Signal, v int32) error {
	var info [sys.SigInfoSize]byte
	*(*int32)(unsafe.Pointer(&info[0])) = int32(sig)
	*(*int32)(unsafe.Pointer(&info[8])) = -1 // SI_QUEUE
	*(*int32)(unsafe.Pointer(&info[16])) = int32(os.Getpid())
	*(*int32)(unsafe.Pointer(&info[24])) = v
	for {
		err := sys.RtSigqueueinfo(sys.PID(pid), sig, &info)
		if !errors.Is(err, unix.EAGAIN) {
			return err
		}
		time.Sleep(100 * time.Microsecond) // the queue is full: let it drain
	}
}

// TestDumpKeepsSignals dumps sigstorm with LeaveRunning three times while a
// POSIX timer and a stream of sigqueue'd signals hit it: every signal the
// freeze or an injected call takes off a queue must be put back as it was,
// so the process sees each one once, in order, with its siginfo.
func TestDumpKeepsSignals(t *testing.T) {
	testenv.RequireRoot(t)
	r := testenv.StartReaper(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	pid := r.Run(t, testenv.RunOpts{Stderr: filepath.Join(dir, "stderr"), Dir: dir}, testenv.VictimArgv(t, "sigstorm", log)...)
	testenv.WaitForLine(t, log, func(l string) bool { return strings.HasPrefix(l, "ready ") }, 10*time.Second)

	const sent = 3000
	const sigRT1 = unix.Signal(35) // glibc SIGRTMIN+1 (glibc keeps the first two RT signals)
	var wg sync.WaitGroup
	var sendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := int32(1); v <= sent; v++ {
			if err := sigqueue(pid, sigRT1, v); err != nil {
				sendErr = fmt.Errorf("sigqueue %d: %w", v, err)
				return
			}
		}
	}()
	for i := 0; i < 3; i++ {
		dumpDir(t, pid, dump.Options{LeaveRunning: true})
	}
	wg.Wait()
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	// Wait until every queued signal was handled, then read the report.
	var report string
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; ; n++ {
		r.MustSignal(t, pid, syscall.SIGUSR1)
		lines := testenv.ReadLines(log)
		report = lines[len(lines)-1]
		var timer, badTimer, queued, badQueued int
		if _, err := fmt.Sscanf(report, "report timer=%d badtimer=%d queued=%d badqueued=%d", &timer, &badTimer, &queued, &badQueued); err == nil {
			if badTimer != 0 || badQueued != 0 || queued > sent {
				t.Fatalf("after 3 dumps: %s: signals were changed (want badtimer=0 badqueued=0, queued <= %d)", report, sent)
			}
			if queued == sent && timer > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 dumps: %s: want queued=%d and timer > 0", report, sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

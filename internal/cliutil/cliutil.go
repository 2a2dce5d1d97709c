// Package cliutil holds what the ckpt commands share.
package cliutil

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// PhaseHook returns the hook the commands pass as the Fault option of a
// dump or restore. With $CKPT_FAULT=PHASE it kills the command with SIGKILL
// when it reaches PHASE: tests use it to prove that a dump or restore that
// dies midway leaves nothing broken behind. With $CKPT_TIMING set it prints
// when each phase starts. It returns nil when neither is set.
func PhaseHook(prog string) func(string) {
	want, timing := os.Getenv("CKPT_FAULT"), os.Getenv("CKPT_TIMING") != ""
	if want == "" && !timing {
		return nil
	}
	start := time.Now()
	return func(phase string) {
		if timing {
			fmt.Fprintf(os.Stderr, "%s: %8.1f ms: %s\n", prog, float64(time.Since(start).Microseconds())/1e3, phase)
		}
		if phase == want {
			unix.Kill(os.Getpid(), unix.SIGKILL)
		}
	}
}

// MiBPerSecond converts a rate in MB/s (10^6 bytes, as dump.Result and
// restore.Result give it) into MiB/s (2^20 bytes), the unit the commands
// print sizes in.
func MiBPerSecond(mbPerSecond float64) float64 { return mbPerSecond * 1e6 / (1 << 20) }

// Command ckpt checkpoints running Linux processes.
//
//	ckpt dump --dir DIR [--leave-running] PID   write PID's image into DIR
//	ckpt show [--json] DIR                      print what an image holds
//	ckpt check [--json]                         check this kernel's features
//	ckpt parity encode|recover ...              XOR parity across node images
//
// Images are restored with ckpt-redo.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

func main() {
	if f := os.Getenv("CKPT_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err == nil {
			pprof.StartCPUProfile(out)
			defer pprof.StopCPUProfile()
		}
	}
	app := &cli.App{
		Name:  "ckpt",
		Usage: "checkpoint running Linux processes",
		Commands: []*cli.Command{
			dumpCommand(),
			showCommand(),
			checkCommand(),
			parityCommand(),
			unlockCommand(),
			{
				Name:   netlock.GuardCommand,
				Hidden: true,
				Action: func(c *cli.Context) error {
					return netlock.RunGuard(c.Args().First(), c.Args().Tail(), os.Stdin)
				},
			},
		},
		HideHelpCommand: true,
	}
	if err := app.Run(os.Args); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintf(os.Stderr, "ckpt: %v\n", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

// printJSON writes v as indented JSON to stdout.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// faultHook returns a hook that kills ckpt with SIGKILL when it reaches the
// phase named by $CKPT_FAULT: tests use it to prove that a dump or restore
// that dies midway leaves nothing broken behind.
//
// With $CKPT_TIMING set, it prints when each phase starts.
func faultHook() func(string) {
	want, timing := os.Getenv("CKPT_FAULT"), os.Getenv("CKPT_TIMING") != ""
	if want == "" && !timing {
		return nil
	}
	start := time.Now()
	return func(phase string) {
		if timing {
			fmt.Fprintf(os.Stderr, "ckpt: %8.1f ms: %s\n", float64(time.Since(start).Microseconds())/1e3, phase)
		}
		if phase == want {
			unix.Kill(os.Getpid(), unix.SIGKILL)
		}
	}
}

func warn(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ckpt: "+format+"\n", args...)
}

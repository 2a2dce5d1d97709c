package main

import (
	"errors"
	"fmt"
	"github.com/ckpt/ckpt/internal/cliutil"
	"os"
	"strconv"
	"time"

	"github.com/ckpt/ckpt/internal/progress"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/sockets"
	"github.com/urfave/cli/v2"
)

func dumpCommand() *cli.Command {
	return &cli.Command{
		Name:      "dump",
		Usage:     "freeze a process, write its image, and kill it (or let it go on)",
		ArgsUsage: "PID",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Aliases: []string{"D"}, Usage: "image directory (created 0700; the image file is 0600)", Required: true},
			&cli.BoolFlag{Name: "leave-running", Aliases: []string{"R"}, Usage: "let the process go on after the dump instead of killing it"},
			&cli.Int64Flag{Name: "ghost-limit", Value: dump.DefaultGhostLimit, Usage: "largest deleted file whose content is kept in the image, in bytes"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("dump: want exactly one PID", 2)
			}
			pid, err := strconv.Atoi(c.Args().First())
			if err != nil || pid <= 0 {
				return cli.Exit(fmt.Sprintf("dump: %q is not a PID", c.Args().First()), 2)
			}
			bar := progress.New(os.Stderr, "dump")
			exe, _ := os.Executable()
			opts := dump.Options{
				GuardExe:     exe,
				LeaveRunning: c.Bool("leave-running"),
				GhostLimit:   c.Int64("ghost-limit"),
				Progress:     bar.Update,
				Fault:        cliutil.PhaseHook("ckpt"),
				Log:          warn,
			}
			var res *dump.Result
			// Connections waiting in a listener's accept queue cannot be
			// saved: let the process accept them and try again.
			for try := 0; ; try++ {
				sink, err := image.CreateDir(c.String("dir"))
				if err != nil {
					return fmt.Errorf("dump %d: %w", pid, err)
				}
				res, err = dump.Run(pid, sink, opts)
				if err == nil || !errors.Is(err, sockets.ErrAcceptQueue) || try == 20 {
					bar.Done()
					if err != nil {
						return err
					}
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if c.Bool("json") {
				return printJSON(res)
			}
			what := "killed"
			if !res.Killed {
				what = "left running"
			}
			fmt.Printf("dumped %d into %s: %d VMAs, %d fds, %d pages (%d zero), %.1f MiB at %.0f MB/s; frozen %v, %s\n",
				pid, c.String("dir"), res.VMAs, res.FDs, res.Pages, res.ZeroPages, float64(res.Bytes)/(1<<20),
				res.MemoryRate, res.Frozen.Round(1e5), what)
			return nil
		},
	}
}

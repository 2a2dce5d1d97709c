package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ckpt/ckpt/internal/cliutil"
	"github.com/ckpt/ckpt/internal/control"
	"github.com/ckpt/ckpt/internal/progress"
	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/transfer"
	"github.com/urfave/cli/v2"
)

func dumpCommand() *cli.Command {
	return &cli.Command{
		Name:      "dump",
		Usage:     "freeze a process, write its image, and kill it (or let it go on)",
		UsageText: "ckpt dump (--dir DIR | --to HOST:PORT) [options] PID",
		Description: "Exactly one of --dir and --to is required: --dir writes the image into a directory\n" +
			"(which must not hold an image already), --to streams it to a receiver.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Aliases: []string{"D"}, Usage: "write the image into `DIR` (created 0700; the image file is 0600); this or --to is required"},
			&cli.StringFlag{Name: "to", Usage: "stream the image to `HOST:PORT`, where ckpt-redo --listen restores it while it arrives, instead of writing it to disk; the process is killed once the receiver holds its copy; this or --dir is required"},
			&cli.IntFlag{Name: "control", Value: -1, Usage: "agent control socket `FD` (group operations; see ckpt agent)"},
			&cli.BoolFlag{Name: "leave-running", Aliases: []string{"R"}, Usage: "let the process go on after the dump instead of killing it"},
			&cli.BoolFlag{Name: "shell-job", Aliases: []string{"j"}, Usage: "accept a session or process group led by a process outside the dump (a job of an interactive shell): ckpt-redo --shell-job puts them into its own"},
			&cli.Int64Flag{Name: "ghost-limit", Value: dump.DefaultGhostLimit, Usage: "largest deleted file whose content is kept in the image, in bytes"},
			&cli.BoolFlag{Name: "skip-in-flight", Usage: "drop the TCP connections waiting in a listener's accept queue (their clients get a reset when they next send) instead of refusing the dump"},
			&cli.StringSliceFlag{Name: "external", Usage: "save UNIX sockets connected to a process outside the dump: `unix` (every one) or unix:INODE (the socket the refusal names); ckpt-redo connects them again to the peer's name, or takes --inherit-fd (repeatable)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(c *cli.Context) error {
			arg, err := oneArg(c, "dump", "PID")
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(arg)
			if err != nil || n <= 0 {
				return cli.Exit(fmt.Sprintf("dump: %q is not a PID", arg), 2)
			}
			pid := sys.PID(n)
			dir, to := c.String("dir"), c.String("to")
			switch {
			case dir == "" && to == "":
				return cli.Exit("dump: say where the image goes: --dir DIR (a directory) or --to HOST:PORT (a receiver)", 2)
			case dir != "" && to != "":
				return cli.Exit("dump: --dir and --to exclude each other: give one", 2)
			}
			if to != "" && c.Bool("leave-running") {
				return cli.Exit("dump: --to migrates the process: with --leave-running there would be two live copies", 2)
			}
			var ctl *control.Channel
			if fd := c.Int("control"); fd >= 0 {
				var err error
				if ctl, err = control.Open(fd); err != nil {
					return cli.Exit("dump: "+err.Error(), 2)
				}
			}
			ext, err := parseExternal(c.StringSlice("external"))
			if err != nil {
				return cli.Exit("dump: "+err.Error(), 2)
			}
			bar := progress.New(os.Stderr, "dump")
			opts := dump.Options{
				SkipInFlight: c.Bool("skip-in-flight"),
				ExternalUnix: ext,
				LeaveRunning: c.Bool("leave-running"),
				ShellJob:     c.Bool("shell-job"),
				GhostLimit:   c.Int64("ghost-limit"),
				Progress:     bar.Update,
				Fault:        cliutil.PhaseHook("ckpt"),
				Log:          warn,
				DropLock:     to != "",
			}
			if ctl != nil {
				opts.Progress = func(done, total int64) {
					bar.Update(done, total)
					ctl.Progress(done, total)
				}
				opts.AfterFreeze = func() error { return ctl.Await("frozen", "continue") }
				opts.BeforeCommit = func() error { return ctl.Await("prepared", "commit") }
			}
			if to != "" {
				sender, err := transfer.Dial(to, 10*time.Second)
				if err != nil {
					return fmt.Errorf("dump %d: %w", pid, err)
				}
				res, err := dump.Run(pid, sender, opts)
				bar.Done()
				if err != nil {
					return err
				}
				if err := sender.Wait(); err != nil {
					return fmt.Errorf("dump %d: %w", pid, err)
				}
				return report(c, pid, "to "+to, res)
			}
			sink, err := image.CreateDir(dir)
			if err != nil {
				return fmt.Errorf("dump %d: %w", pid, err)
			}
			if sink.StaleRemoved() {
				warn("removed the partial image a dump that did not finish left in %s", dir)
			}
			res, err := dump.Run(pid, sink, opts)
			bar.Done()
			if err != nil {
				return err
			}
			return report(c, pid, "into "+dir, res)
		},
	}
}

func report(c *cli.Context, pid sys.PID, where string, res *dump.Result) error {
	if c.Bool("json") {
		return printJSON(res)
	}
	what := "killed"
	if !res.Killed {
		what = "left running"
	}
	fmt.Printf("dumped %d %s: %d VMAs, %d fds, %d pages (%d zero), %.1f MiB at %.0f MiB/s; frozen %v, %s\n",
		pid, where, res.VMAs, res.FDs, res.Pages, res.ZeroPages, float64(res.Bytes)/(1<<20),
		cliutil.MiBPerSecond(res.MemoryRate), res.Frozen.Round(1e5), what)
	return nil
}

// parseExternal reads the --external values: "unix" allows every UNIX
// socket connected outside the dump (inode 0), "unix:INODE" one.
func parseExternal(vals []string) ([]uint32, error) {
	var out []uint32
	for _, v := range vals {
		if v == "unix" {
			out = append(out, 0)
			continue
		}
		rest, ok := strings.CutPrefix(v, "unix:")
		n, err := strconv.ParseUint(rest, 10, 32)
		if !ok || err != nil || n == 0 {
			return nil, fmt.Errorf("--external %q: want unix or unix:INODE", v)
		}
		out = append(out, uint32(n))
	}
	return out, nil
}

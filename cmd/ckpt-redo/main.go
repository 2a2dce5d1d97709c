// Command ckpt-redo restores a process from a ckpt image.
//
//	ckpt-redo [--shell-job] [--inherit-fd N]... [--stdio FILE] DIR
//
// It returns once the process runs again under its old PID, detached: its
// parent becomes init or the nearest child subreaper.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ckpt/ckpt/internal/cliutil"
	"os"
	"runtime"
	"strconv"

	"github.com/ckpt/ckpt/internal/progress"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/restore"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

func main() {
	app := &cli.App{
		Name:      "ckpt-redo",
		Usage:     "restore a process from a ckpt image",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "shell-job", Aliases: []string{"j"}, Usage: "attach the process's terminal fds to the terminal ckpt-redo runs on"},
			&cli.StringSliceFlag{Name: "inherit-fd", Usage: "give the process's fd `N` this ckpt-redo's own fd N (repeatable)"},
			&cli.StringFlag{Name: "stdio", Usage: "replace fds 0-2 that cannot be restored (a pipe or terminal outside the dump) with `FILE`, e.g. /dev/null"},
			&cli.StringFlag{Name: "rules", Usage: "endpoint rewrite rules `FILE` (default: $" + rewrite.EnvVar + "): move TCP and UDP endpoints to new addresses"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: run,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "ckpt-redo: %v\n", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

func run(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("want one image directory", 2)
	}
	opts := restore.Options{
		ShellJob: c.Bool("shell-job"),
		Stdio:    c.String("stdio"),
		Inherit:  map[int]*os.File{},
		Fault:    cliutil.PhaseHook("ckpt-redo"),
		Log: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "ckpt-redo: "+format+"\n", args...)
		},
	}
	rules, err := rewrite.LoadFlagOrEnv(c.String("rules"))
	if err != nil {
		return cli.Exit(fmt.Sprintf("ckpt-redo: %v", err), 2)
	}
	opts.Rules = rules
	for _, s := range c.StringSlice("inherit-fd") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return cli.Exit(fmt.Sprintf("--inherit-fd %q: want a file descriptor number", s), 2)
		}
		if _, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0); err != nil {
			return cli.Exit(fmt.Sprintf("--inherit-fd %d: ckpt-redo has no fd %d open", n, n), 2)
		}
		opts.Inherit[n] = os.NewFile(uintptr(n), "inherited-"+s)
	}
	f, err := image.OpenDir(c.Args().First())
	if err != nil {
		return err
	}
	defer f.Close()
	bar := progress.New(os.Stderr, "restore")
	opts.Progress = bar.Update
	runtime.LockOSThread()
	res, err := restore.Restore(f, opts)
	bar.Done()
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Printf("restored %d: %d pages (%.1f MiB at %.0f MB/s) in %v\n", res.PID, res.Pages,
		float64(res.Bytes)/(1<<20), res.MemoryRate, res.Build.Round(1e5))
	return nil
}

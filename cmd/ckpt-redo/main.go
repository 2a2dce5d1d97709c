// Command ckpt-redo restores a process from a ckpt image.
//
//	ckpt-redo [--shell-job] [--inherit-fd N]... [--stdio FILE] [--rules FILE] [--tcp-close] DIR
//	ckpt-redo --listen HOST:PORT [--keep DIR] [options]
//
// It returns once the process runs again under its old PID, detached: its
// parent becomes init or the nearest child subreaper. With --listen it
// receives one image from `ckpt dump --to` and restores it while it
// arrives; the process is released only once its source is gone.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"github.com/ckpt/ckpt/internal/cliutil"
	"github.com/ckpt/ckpt/internal/control"
	"github.com/ckpt/ckpt/internal/progress"
	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/restore"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/ckpt/ckpt/pkg/transfer"
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
			&cli.BoolFlag{Name: "tcp-close", Usage: "restore every TCP connection closed (the program reads end of file): for a process moved where its peers cannot follow"},
			&cli.StringFlag{Name: "listen", Usage: "receive one image (sent by ckpt dump --to) on `HOST:PORT` (port 0: any) and restore it while it arrives"},
			&cli.StringFlag{Name: "keep", Usage: "with --listen, also store the received image in `DIR`"},
			&cli.IntFlag{Name: "control", Value: -1, Usage: "agent control socket `FD` (group operations; see ckpt agent)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action:          run,
		HideHelpCommand: true,
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
	listen := c.String("listen")
	if (c.NArg() == 1) == (listen != "") || c.NArg() > 1 {
		return cli.Exit("want one image directory, or --listen HOST:PORT", 2)
	}
	if c.String("keep") != "" && listen == "" {
		return cli.Exit("--keep goes with --listen", 2)
	}
	opts := restore.Options{
		ShellJob: c.Bool("shell-job"),
		TCPClose: c.Bool("tcp-close"),
		Stdio:    c.String("stdio"),
		Inherit:  map[sys.TargetFD]*os.File{},
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
		opts.Inherit[sys.TargetFD(n)] = os.NewFile(uintptr(n), "inherited-"+s)
	}
	var ctl *control.Channel
	if fd := c.Int("control"); fd >= 0 {
		if ctl, err = control.Open(fd); err != nil {
			return cli.Exit(err.Error(), 2)
		}
		// Run by an agent: one member of a group operation.
		opts.Group = true
	}
	bar := progress.New(os.Stderr, "restore")
	opts.Progress = bar.Update
	runtime.LockOSThread()
	var res *restore.Result
	if listen != "" {
		res, err = receive(listen, c.String("keep"), opts, ctl, bar)
	} else {
		res, err = restoreDir(c.Args().First(), opts, ctl, bar)
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Printf("restored %d: %d pages (%.1f MiB at %.0f MiB/s) in %v\n", res.PID, res.Pages,
		float64(res.Bytes)/(1<<20), cliutil.MiBPerSecond(res.MemoryRate), res.Build.Round(1e5))
	return nil
}

// restoreDir restores the image in dir. With a control channel the
// processes are held built until the group says "release".
func restoreDir(dir string, opts restore.Options, ctl *control.Channel, bar *progress.Bar) (*restore.Result, error) {
	f, err := image.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := restore.Build(f, opts)
	bar.Done()
	if err != nil {
		return nil, unlockHint(err, "ckpt unlock "+dir)
	}
	if err := ctl.Await("built", "release"); err != nil {
		r.Kill()
		return nil, fmt.Errorf("restore %d: %w", r.PID, err)
	}
	if err := r.Release(); err != nil {
		return nil, err
	}
	ctl.Event("released")
	return &r.Result, nil
}

// receive accepts one image on addr and restores it while it arrives; the
// processes run once the sender has killed their source.
func receive(addr, keep string, opts restore.Options, ctl *control.Channel, bar *progress.Bar) (*restore.Result, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	defer l.Close()
	if ctl != nil {
		ctl.Event("listening %s", l.Addr())
	} else {
		fmt.Fprintf(os.Stderr, "ckpt-redo: listening on %s\n", l.Addr())
	}
	rc, err := transfer.Accept(l, keep)
	if err != nil {
		return nil, err
	}
	l.Close()
	r, err := restore.Build(rc.Image(), opts)
	bar.Done()
	if err != nil {
		rc.Fail(err)
		return nil, unlockHint(fmt.Errorf("receive from %s: %w", rc.Peer, err), "")
	}
	ctl.Event("built")
	if err := rc.Ready(); err != nil {
		r.Kill()
		return nil, fmt.Errorf("restore %d: %w", r.PID, err)
	}
	if err := r.Release(); err != nil {
		rc.Fail(err)
		return nil, err
	}
	rc.Released()
	ctl.Event("released")
	return &r.Result, nil
}

// unlockHint adds to a failed restore that left the dump's network lock
// in place the command that lifts it (cmd, or ckpt unlock --table NAME),
// on the same line: the agent passes the last line of a tool's errors on.
func unlockHint(err error, cmd string) error {
	var le *restore.LockedError
	if !errors.As(err, &le) {
		return err
	}
	if cmd == "" {
		cmd = "ckpt unlock --table " + le.Table
	}
	return fmt.Errorf("%w; to give up the connections instead of retrying: %s", err, cmd)
}

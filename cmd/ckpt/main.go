// Command ckpt checkpoints running Linux processes.
//
//	ckpt dump --dir DIR [--leave-running] [--shell-job] PID   write PID's image into DIR
//	ckpt show [--json] DIR                      print what an image holds
//	ckpt check [--json]                         check this kernel's features
//	ckpt parity encode|recover ...              XOR parity across node images
//	ckpt agent --listen ADDR --root DIR          serve group operations on a node
//	ckpt group checkpoint|restore|parity|recover|migrate ...
//	                                             drive a job spread over nodes
//
// Images are restored with ckpt-redo.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/urfave/cli/v2"
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
			agentCommand(),
			groupCommand(),
			unlockCommand(),
			{
				Name:   netlock.GuardCommand,
				Hidden: true,
				Action: func(c *cli.Context) error {
					return netlock.RunGuard(c.Args().First(), c.Args().Tail(), os.Stdin)
				},
			},
			{
				Name:   netlock.HoldCommand,
				Hidden: true,
				Action: func(c *cli.Context) error {
					return netlock.RunHolder(c.Args().Get(0), c.Args().Get(1), c.Args().Get(2))
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

func warn(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ckpt: "+format+"\n", args...)
}

// oneArg returns the one argument of command cmd (ARG names it in
// messages). Flags given after it are not parsed (the flag package stops
// at the first argument): that is said, rather than "want one ARG".
func oneArg(c *cli.Context, cmd, arg string) (string, error) {
	if c.NArg() == 1 {
		return c.Args().First(), nil
	}
	for i, a := range c.Args().Slice() {
		if i > 0 && strings.HasPrefix(a, "-") {
			return "", cli.Exit(fmt.Sprintf("%s: %s comes after the %s: options go before it (ckpt %s [options] %s)", cmd, a, arg, cmd, arg), 2)
		}
	}
	return "", cli.Exit(fmt.Sprintf("%s: want exactly one %s", cmd, arg), 2)
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ckpt/ckpt/pkg/agent"
	"github.com/urfave/cli/v2"
)

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "serve group operations on this node (run it as PID 1 of the node's namespaces)",
		Description: "The agent listens for a coordinator (ckpt group ...) on every --listen address, stores images\n" +
			"under --root, and uses --data-ip for the links between nodes (transfers, the parity ring).\n" +
			"As PID 1 of a PID namespace it reaps the node's orphans and keeps PIDs of restored jobs free.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "listen", Required: true, Usage: "control address `unix:PATH` or HOST:PORT (repeatable)"},
			&cli.StringFlag{Name: "root", Required: true, Usage: "`DIR` holding this node's images"},
			&cli.StringFlag{Name: "data-ip", Usage: "this node's `IP` on the network between nodes"},
			&cli.StringFlag{Name: "redo", Usage: "ckpt-redo executable (default: next to ckpt)"},
			&cli.StringFlag{Name: "log", Usage: "append one line per operation to `FILE`"},
			&cli.IntFlag{Name: "tool-pid-base", Usage: "start of the PID range of the agent's own tools (`PID`; default 20000); give spares and migration destinations another one than the nodes whose jobs they may receive"},
		},
		Action: func(c *cli.Context) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			redo := c.String("redo")
			if redo == "" {
				redo = filepath.Join(filepath.Dir(exe), "ckpt-redo")
			}
			cfg := agent.Config{Root: c.String("root"), Ckpt: exe, Redo: redo, DataIP: c.String("data-ip"), ToolPIDBase: c.Int("tool-pid-base")}
			if p := c.String("log"); p != "" {
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
				if err != nil {
					return err
				}
				defer f.Close()
				cfg.Log = func(format string, args ...any) {
					fmt.Fprintf(f, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
				}
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			go a.Reap(ctx)
			errc := make(chan error, len(c.StringSlice("listen")))
			for _, addr := range c.StringSlice("listen") {
				l, err := agent.Listen(addr)
				if err != nil {
					return fmt.Errorf("agent: listen %s: %w", addr, err)
				}
				go func() { errc <- a.Serve(ctx, l) }()
			}
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
				return nil
			}
		},
	}
}

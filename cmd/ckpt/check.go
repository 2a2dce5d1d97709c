package main

import (
	"fmt"
	"os"

	"github.com/ckpt/ckpt/pkg/kernelcheck"
	"github.com/urfave/cli/v2"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "probe the kernel features ckpt uses (the probes dump and restore run before they start)",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"}},
		Action: func(c *cli.Context) error {
			results := kernelcheck.Run()
			if c.Bool("json") {
				if err := printJSON(results); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					mark, what := "ok  ", r.Use
					if !r.OK {
						mark, what = "FAIL", r.Error
						if !r.Required {
							mark = "warn"
						}
					}
					fmt.Fprintf(os.Stdout, "%s %-26s %-16s %s\n", mark, r.Name, r.NeededBy, what)
				}
			}
			for _, r := range results {
				if r.Required && !r.OK {
					return cli.Exit("check: this kernel lacks features ckpt needs", 1)
				}
			}
			return nil
		},
	}
}

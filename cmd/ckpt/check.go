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
		Usage: "report which kernel features ckpt needs and whether this kernel has them",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"}},
		Action: func(c *cli.Context) error {
			results := kernelcheck.Run()
			if c.Bool("json") {
				if err := printJSON(results); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					mark := "ok  "
					if !r.OK {
						mark = "FAIL"
						if !r.Required {
							mark = "warn"
						}
					}
					fmt.Fprintf(os.Stdout, "%s %-28s %s\n", mark, r.Name, r.Detail)
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

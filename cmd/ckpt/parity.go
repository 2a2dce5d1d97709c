package main

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/parity"
	"github.com/urfave/cli/v2"
)

func parityCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print the report as JSON"}
	report := func(c *cli.Context, r parity.Report) error {
		if c.Bool("json") {
			return printJSON(r)
		}
		fmt.Printf("%s: %d nodes, %d stripes of %d KiB, %.1f MiB in %v (%.0f MB/s)\n",
			r.Op, r.N, r.Stripes, r.BlockSize>>10, float64(r.Bytes)/(1<<20), r.Duration.Round(1e6), r.MBps)
		for _, n := range r.Nodes {
			fmt.Printf("  node %d %s: image %d bytes, sent %d, stored %d\n", n.Index, n.Dir, n.ImageSize, n.BytesSent, n.BytesStored)
		}
		return nil
	}
	return &cli.Command{
		Name:            "parity",
		Usage:           "XOR parity across node image directories (SCore ring algorithm)",
		HideHelpCommand: true,
		Subcommands: []*cli.Command{
			{
				Name:      "encode",
				Usage:     "compute parity shares for the images in DIR... (ring order = argument order, at least 3)",
				ArgsUsage: "DIR DIR DIR...",
				Flags:     []cli.Flag{jsonFlag, &cli.IntFlag{Name: "block-size", Usage: "ring block size in bytes (default 4 MiB)"}},
				Action: func(c *cli.Context) error {
					r, err := parity.EncodeDirs(c.Context, c.Args().Slice(), parity.Options{BlockSize: c.Int("block-size")})
					if err != nil {
						return fmt.Errorf("parity encode: %w", err)
					}
					return report(c, r)
				},
			},
			{
				Name:      "recover",
				Usage:     "rebuild the lost node's image and parity share from the survivors",
				ArgsUsage: "--lost DIR DIR DIR...",
				Flags:     []cli.Flag{jsonFlag, &cli.StringFlag{Name: "lost", Required: true, Usage: "directory of the lost node, to rebuild"}},
				Action: func(c *cli.Context) error {
					r, err := parity.RecoverDir(c.Context, c.String("lost"), c.Args().Slice(), parity.Options{})
					if err != nil {
						return fmt.Errorf("parity recover: %w", err)
					}
					return report(c, r)
				},
			},
		},
	}
}

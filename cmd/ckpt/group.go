package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/ckpt/ckpt/internal/progress"
	"github.com/ckpt/ckpt/pkg/coord"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/urfave/cli/v2"
)

func groupCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print the report as JSON"}
	manifestFlag := &cli.StringFlag{Name: "manifest", Aliases: []string{"m"}, Required: true, Usage: "group manifest `FILE`"}
	// coordinator logs phases and draws the members' memory progress on
	// stderr (a terminal only), or stays quiet with --json.
	coordinator := func(c *cli.Context) (*coord.Coordinator, *progress.Bar) {
		co := &coord.Coordinator{}
		var bar *progress.Bar
		if !c.Bool("json") {
			bar = progress.New(os.Stderr, "memory")
			co.Progress = bar.Update
			co.Log = func(format string, args ...any) {
				bar.Done()
				fmt.Fprintf(os.Stderr, "ckpt group: "+format+"\n", args...)
			}
		}
		return co, bar
	}
	members := func(c *cli.Context) ([]coord.Member, error) {
		if c.NArg() == 0 {
			return nil, cli.Exit("group: want members PID@AGENT...", 2)
		}
		var ms []coord.Member
		for _, a := range c.Args().Slice() {
			m, err := coord.ParseMember(a)
			if err != nil {
				return nil, cli.Exit("group: "+err.Error(), 2)
			}
			ms = append(ms, m)
		}
		return ms, nil
	}
	// rules reads the rules file and checks it here, before any agent is
	// asked anything: a syntax error is reported once, with its line.
	rules := func(c *cli.Context) (string, error) {
		p := c.String("rules")
		if p == "" {
			p = os.Getenv(rewrite.EnvVar)
		}
		if p == "" {
			return "", nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("rules: %w", err)
		}
		if _, err := rewrite.Parse(bytes.NewReader(b), p); err != nil {
			return "", cli.Exit("group: "+err.Error(), 2)
		}
		return string(b), nil
	}
	out := func(c *cli.Context, rep *coord.Report, m *coord.Manifest) error {
		if c.Bool("json") {
			return printJSON(struct {
				Report   *coord.Report   `json:"report"`
				Manifest *coord.Manifest `json:"manifest,omitempty"`
			}{rep, m})
		}
		if rep != nil {
			fmt.Printf("%s: %d members in %v", rep.Op, len(rep.Members), rep.Duration.Round(1e6))
			if rep.Frozen > 0 {
				fmt.Printf(" (frozen at most %v)", rep.Frozen.Round(1e6))
			}
			fmt.Println()
			if p := rep.Parity; p != nil {
				printParity(p)
			}
		}
		return nil
	}
	return &cli.Command{
		Name:  "group",
		Usage: "checkpoint, restore, protect and migrate a job spread over several nodes (through their ckpt agents)",
		Description: "Members are PID@AGENT, AGENT being a ckpt agent's control address (HOST:PORT or unix:PATH);\n" +
			"each member is dumped with its descendants. The member order is the parity ring order.",
		HideHelpCommand: true,
		Subcommands: []*cli.Command{
			{
				Name:      "exec",
				Usage:     "start a program on a node (in a new session, stdin /dev/null) and print its PID there",
				ArgsUsage: "--agent AGENT [--stdout FILE] -- PROGRAM ARGS...",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "agent", Required: true, Usage: "the node's `AGENT`"},
					&cli.StringFlag{Name: "stdout", Usage: "append stdout and stderr to `FILE` (default /dev/null)"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return cli.Exit("group exec: want a program", 2)
					}
					co, bar := coordinator(c)
					defer bar.Done()
					pid, err := co.Exec(c.Context, c.String("agent"), c.Args().Slice(), c.String("stdout"))
					if err != nil {
						return err
					}
					fmt.Println(pid)
					return nil
				},
			},
			{
				Name:      "kill",
				Usage:     "kill members with their descendants and wait until they are gone",
				ArgsUsage: "PID@AGENT...",
				Action: func(c *cli.Context) error {
					ms, err := members(c)
					if err != nil {
						return err
					}
					co, bar := coordinator(c)
					defer bar.Done()
					return co.Kill(c.Context, ms)
				},
			},
			{
				Name:      "checkpoint",
				Usage:     "consistent checkpoint of every member into its node's storage",
				ArgsUsage: "--name NAME --manifest FILE PID@AGENT...",
				Flags: []cli.Flag{jsonFlag, manifestFlag,
					&cli.StringFlag{Name: "name", Required: true, Usage: "checkpoint `NAME` (images go to ROOT/NAME/PID on each node)"},
					&cli.BoolFlag{Name: "parity", Usage: "protect the images with XOR parity across the nodes (≥ 3, one member each)"},
					&cli.BoolFlag{Name: "kill", Usage: "kill the members once every image is complete"},
					&cli.IntFlag{Name: "block-size", Usage: "parity ring block size in bytes (default 4 MiB)"},
				},
				Action: func(c *cli.Context) error {
					ms, err := members(c)
					if err != nil {
						return err
					}
					name := c.String("name")
					if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
						return cli.Exit("group: --name must be a plain name", 2)
					}
					co, bar := coordinator(c)
					defer bar.Done()
					m, rep, err := co.Checkpoint(c.Context, name, ms,
						coord.CheckpointOptions{Kill: c.Bool("kill"), Parity: c.Bool("parity"), BlockSize: c.Int("block-size")})
					if m != nil {
						if serr := m.Save(c.String("manifest")); serr != nil && err == nil {
							err = serr
						}
					}
					if err != nil {
						return err
					}
					return out(c, rep, m)
				},
			},
			{
				Name:      "restore",
				Usage:     "restore every member of a group checkpoint on its node, all released together",
				ArgsUsage: "--manifest FILE",
				Flags:     []cli.Flag{jsonFlag, manifestFlag, &cli.StringFlag{Name: "rules", Usage: "endpoint rewrite rules `FILE` (default: $CKPT_REWRITE_RULES)"}},
				Action: func(c *cli.Context) error {
					m, err := coord.Load(c.String("manifest"))
					if err != nil {
						return err
					}
					r, err := rules(c)
					if err != nil {
						return err
					}
					co, bar := coordinator(c)
					defer bar.Done()
					rep, err := co.Restore(c.Context, m, r)
					if err != nil {
						return err
					}
					return out(c, rep, nil)
				},
			},
			{
				Name:      "parity",
				Usage:     "compute XOR parity across the images of a group checkpoint",
				ArgsUsage: "--manifest FILE",
				Flags:     []cli.Flag{jsonFlag, manifestFlag},
				Action: func(c *cli.Context) error {
					m, err := coord.Load(c.String("manifest"))
					if err != nil {
						return err
					}
					co, bar := coordinator(c)
					defer bar.Done()
					p, err := co.Encode(c.Context, m)
					if err != nil {
						return err
					}
					m.Parity = true
					if err := m.Save(c.String("manifest")); err != nil {
						return err
					}
					return out(c, &coord.Report{Op: "parity", Members: nil, Duration: p.Duration, Parity: p}, nil)
				},
			},
			{
				Name:      "recover",
				Usage:     "rebuild a lost member's image on a spare node from the others' images and parity",
				ArgsUsage: "--manifest FILE --lost INDEX --spare AGENT",
				Flags: []cli.Flag{jsonFlag, manifestFlag,
					&cli.IntFlag{Name: "lost", Required: true, Usage: "ring `INDEX` (member position, from 0) of the lost member"},
					&cli.StringFlag{Name: "spare", Required: true, Usage: "`AGENT` of the node that receives the rebuilt image"},
				},
				Action: func(c *cli.Context) error {
					m, err := coord.Load(c.String("manifest"))
					if err != nil {
						return err
					}
					co, bar := coordinator(c)
					defer bar.Done()
					nm, p, err := co.Recover(c.Context, m, c.Int("lost"), c.String("spare"))
					if err != nil {
						return err
					}
					if err := nm.Save(c.String("manifest")); err != nil {
						return err
					}
					return out(c, &coord.Report{Op: "recover", Duration: p.Duration, Parity: p}, nm)
				},
			},
			{
				Name:      "migrate",
				Usage:     "move running members to other nodes: each image streams to its destination, which restores it as it arrives",
				ArgsUsage: "--to AGENT... [--rules FILE] PID@AGENT...",
				Flags: []cli.Flag{jsonFlag,
					&cli.StringSliceFlag{Name: "to", Required: true, Usage: "destination `AGENT` of each member, in order (repeatable)"},
					&cli.StringFlag{Name: "rules", Usage: "endpoint rewrite rules `FILE` (default: $CKPT_REWRITE_RULES)"},
				},
				Action: func(c *cli.Context) error {
					ms, err := members(c)
					if err != nil {
						return err
					}
					r, err := rules(c)
					if err != nil {
						return err
					}
					co, bar := coordinator(c)
					defer bar.Done()
					moved, rep, err := co.Migrate(c.Context, ms, c.StringSlice("to"), r)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(struct {
							Report  *coord.Report  `json:"report"`
							Members []coord.Member `json:"members"`
						}{rep, moved})
					}
					out(c, rep, nil)
					for _, m := range moved {
						fmt.Println(m)
					}
					return nil
				},
			},
		},
	}
}

func printParity(p *coord.ParityReport) {
	fmt.Printf("parity %s: %d nodes, %d KiB blocks, %.1f MiB in %v (%.0f MB/s)\n",
		p.Op, p.N, p.BlockSize>>10, float64(p.Bytes)/(1<<20), p.Duration.Round(1e6), p.MBps)
	for _, n := range p.Nodes {
		fmt.Printf("  node %d: sent %d, stored %d\n", n.Index, n.BytesSent, n.BytesStored)
	}
}

package main

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/urfave/cli/v2"
)

func unlockCommand() *cli.Command {
	return &cli.Command{
		Name:      "unlock",
		Usage:     "lift the network lock an image holds on its TCP connections (their peers may then be reset)",
		ArgsUsage: "DIR | --table NAME | --list",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "list", Usage: "list the ckpt lock tables present in this network namespace, one per line"},
			&cli.StringFlag{Name: "table", Usage: "lift the lock table `NAME` (from --list) when its image is gone"},
		},
		Action: func(c *cli.Context) error {
			if name := c.String("table"); name != "" {
				if err := netlock.Release(name, -1); err != nil {
					return err
				}
				fmt.Printf("lifted network lock %s\n", name)
				return nil
			}
			if c.Bool("list") {
				ts, err := netlock.Tables()
				if err != nil {
					return err
				}
				for _, t := range ts {
					fmt.Println(t)
				}
				return nil
			}
			dir, err := oneArg(c, "unlock", "DIR")
			if err != nil {
				return err
			}
			s, err := readSummary(dir)
			if err != nil {
				return err
			}
			if s.Header.NetLock == "" {
				fmt.Println("the image holds no network lock")
				return nil
			}
			if err := netlock.Release(s.Header.NetLock, -1); err != nil {
				return err
			}
			fmt.Printf("lifted network lock %s\n", s.Header.NetLock)
			return nil
		},
	}
}

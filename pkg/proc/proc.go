// Package proc reads the parts of /proc/PID that a checkpoint needs, with
// the exact field types the kernel uses (64-bit addresses, octal flags).
package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Path returns /proc/PID/name... .
func Path(pid int, name ...string) string {
	return filepath.Join(append([]string{"/proc", strconv.Itoa(pid)}, name...)...)
}

// Stat is the part of /proc/PID/stat ckpt uses.
type Stat struct {
	PID     int
	Comm    string
	State   byte
	PPID    int
	PGRP    int
	Session int
	Flags   uint64
	Threads int
	// mm fields
	StartCode, EndCode, StartStack     uint64
	StartData, EndData, StartBrk       uint64
	ArgStart, ArgEnd, EnvStart, EnvEnd uint64
	ExitCode                           int
}

// PFKthread is the kernel-thread bit of Stat.Flags.
const PFKthread = 0x00200000

// ReadStat parses /proc/PID/stat, or /proc/PID/task/TID/stat when tid > 0.
func ReadStat(pid, tid int) (*Stat, error) {
	p := Path(pid, "stat")
	if tid > 0 {
		p = Path(pid, "task", strconv.Itoa(tid), "stat")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return parseStat(b)
}

func parseStat(b []byte) (*Stat, error) {
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open || close+2 > len(b) {
		return nil, fmt.Errorf("malformed stat %q", b)
	}
	s := &Stat{Comm: string(b[open+1 : close])}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return nil, fmt.Errorf("malformed stat pid: %w", err)
	}
	s.PID = pid
	f := strings.Fields(string(b[close+2:]))
	// f[0] is field 3 (state).
	if len(f) < 50 {
		return nil, fmt.Errorf("stat has %d fields, want at least 52", len(f)+2)
	}
	num := func(field int) uint64 {
		v, _ := strconv.ParseUint(f[field-3], 10, 64)
		return v
	}
	inum := func(field int) int {
		v, _ := strconv.Atoi(f[field-3])
		return v
	}
	s.State = f[0][0]
	s.PPID, s.PGRP, s.Session = inum(4), inum(5), inum(6)
	s.Flags = num(9)
	s.Threads = inum(20)
	s.StartCode, s.EndCode, s.StartStack = num(26), num(27), num(28)
	s.StartData, s.EndData, s.StartBrk = num(45), num(46), num(47)
	s.ArgStart, s.ArgEnd, s.EnvStart, s.EnvEnd = num(48), num(49), num(50), num(51)
	s.ExitCode = inum(52)
	return s, nil
}

// Tasks lists the thread IDs of a process, sorted, the leader first.
func Tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(Path(pid, "task"))
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, t)
		}
	}
	sort.Slice(tids, func(i, j int) bool {
		if tids[i] == pid || tids[j] == pid {
			return tids[i] == pid
		}
		return tids[i] < tids[j]
	})
	return tids, nil
}

// Children lists the children of every thread of a process.
func Children(pid int) ([]int, error) {
	tids, err := Tasks(pid)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range tids {
		b, err := os.ReadFile(Path(pid, "task", strconv.Itoa(t), "children"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

// Status holds the fields of /proc/PID/status ckpt uses, by name.
type Status map[string]string

// ReadStatus parses /proc/PID/status.
func ReadStatus(pid int) (Status, error) {
	f, err := os.Open(Path(pid, "status"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st := Status{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	return st, sc.Err()
}

// Ints returns a whitespace-separated list of decimal numbers.
func (s Status) Ints(key string) []int {
	var out []int
	for _, f := range strings.Fields(s[key]) {
		if v, err := strconv.Atoi(f); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// Hex returns a hexadecimal field (capability sets, signal masks).
func (s Status) Hex(key string) uint64 {
	v, _ := strconv.ParseUint(s[key], 16, 64)
	return v
}

// Int returns a decimal field.
func (s Status) Int(key string) int {
	v, _ := strconv.Atoi(strings.Fields(s[key] + " 0")[0])
	return v
}

// Octal returns an octal field (Umask).
func (s Status) Octal(key string) int {
	v, _ := strconv.ParseUint(s[key], 8, 32)
	return int(v)
}

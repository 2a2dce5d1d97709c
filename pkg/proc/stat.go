package proc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// Stat is the part of /proc/PID/stat ckpt uses.
type Stat struct {
	PID     sys.PID // the first field: the TID when read for a thread
	Comm    string
	State   byte
	PPID    sys.PID
	PGRP    sys.PID
	Session sys.PID
	TTY     int // tty_nr: the controlling terminal's device number, 0 if none
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
func ReadStat(pid sys.PID, tid sys.TID) (*Stat, error) { return readStat(root, pid, tid) }

func readStat(root string, pid sys.PID, tid sys.TID) (*Stat, error) {
	dir, id := root, int(pid)
	if tid > 0 {
		dir, id = filepath.Join(root, pid.String(), "task"), int(tid)
	}
	p, err := procOf(dir, id)
	if err != nil {
		return nil, err
	}
	ps, err := p.Stat()
	if err != nil {
		return nil, err
	}
	if ps.State == "" {
		return nil, fmt.Errorf("%s/%d/stat: no state", dir, id)
	}
	s := &Stat{
		PID: sys.PID(ps.PID), Comm: ps.Comm, State: ps.State[0],
		PPID: sys.PID(ps.PPID), PGRP: sys.PID(ps.PGRP), Session: sys.PID(ps.Session), TTY: ps.TTY,
		Flags: uint64(ps.Flags), Threads: ps.NumThreads,
		StartCode: ps.StartCode, EndCode: ps.EndCode, StartStack: ps.StartStack,
	}
	b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(id), "stat"))
	if err != nil {
		return nil, err
	}
	t, err := parseStatTail(b)
	if err != nil {
		return nil, fmt.Errorf("%s/%d/stat: %w", dir, id, err)
	}
	s.StartData, s.EndData, s.StartBrk = t.StartData, t.EndData, t.StartBrk
	s.ArgStart, s.ArgEnd, s.EnvStart, s.EnvEnd = t.ArgStart, t.ArgEnd, t.EnvStart, t.EnvEnd
	s.ExitCode = t.ExitCode
	return s, nil
}

// parseStatTail parses fields 45 to 52 of a stat line (start_data ...
// exit_code), which procfs.ProcStat stops short of: it ends at field 44
// (cguest_time).
func parseStatTail(b []byte) (Stat, error) {
	var s Stat
	close := bytes.LastIndexByte(b, ')')
	if close < 0 || close+2 > len(b) {
		return s, fmt.Errorf("malformed stat %q", b)
	}
	f := strings.Fields(string(b[close+2:]))
	// f[0] is field 3 (state).
	if len(f) < 50 {
		return s, fmt.Errorf("stat has %d fields, want at least 52", len(f)+2)
	}
	var err error
	num := func(field int) uint64 {
		v, e := strconv.ParseUint(f[field-3], 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("stat field %d: %w", field, e)
		}
		return v
	}
	s.StartData, s.EndData, s.StartBrk = num(45), num(46), num(47)
	s.ArgStart, s.ArgEnd, s.EnvStart, s.EnvEnd = num(48), num(49), num(50), num(51)
	code, e := strconv.Atoi(f[52-3])
	if e != nil && err == nil {
		err = fmt.Errorf("stat field 52: %w", e)
	}
	s.ExitCode = code
	return s, err
}

package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// Status is the part of /proc/PID/status ckpt uses.
type Status struct {
	// From procfs.ProcStatus.
	TGID                                   sys.PID
	UID, GID                               [4]int // real, effective, saved, fs
	CapInh, CapPrm, CapEff, CapBnd, CapAmb uint64
	VmLck                                  uint64 // locked memory, bytes

	// Parsed here (see parseStatus).
	State                          byte
	Umask                          int
	TracerPID                      sys.PID
	Groups                         []int
	SigPnd, ShdPnd, SigBlk, SigIgn uint64
	SigCgt                         uint64
	NoNewPrivs                     bool
	Seccomp                        int // 0 off, 1 strict, 2 filter
	// UntagMask is the x86 linear address masking mask, all ones when
	// LAM is off or the kernel does not say.
	UntagMask uint64
	// X86ThreadFeatures is the x86_Thread_features line (shadow stack),
	// "" for none.
	X86ThreadFeatures string
}

// ReadStatus parses /proc/PID/status: the process's, as its leader
// thread has it (the signal mask and pending set are the leader's).
func ReadStatus(pid sys.PID) (*Status, error) { return readStatus(root, int(pid)) }

// ReadThreadStatus parses /proc/TID/status: a thread's own.
func ReadThreadStatus(tid sys.TID) (*Status, error) { return readStatus(root, int(tid)) }

// readStatus reads the status of id (a PID or a TID) under root.
func readStatus(root string, id int) (*Status, error) {
	pid := id
	p, err := procOf(root, pid)
	if err != nil {
		return nil, err
	}
	ps, err := p.NewStatus()
	if err != nil {
		return nil, fmt.Errorf("%s/%d/status: %w", root, pid, err)
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "status"))
	if err != nil {
		return nil, err
	}
	s, err := parseStatus(b)
	if err != nil {
		return nil, fmt.Errorf("%s/%d/status: %w", root, pid, err)
	}
	s.TGID = sys.PID(ps.TGID)
	for i := range 4 {
		s.UID[i], s.GID[i] = int(ps.UIDs[i]), int(ps.GIDs[i])
	}
	s.CapInh, s.CapPrm, s.CapEff, s.CapBnd, s.CapAmb = ps.CapInh, ps.CapPrm, ps.CapEff, ps.CapBnd, ps.CapAmb
	s.VmLck = ps.VmLck
	return s, nil
}

// parseStatus parses the status fields procfs.ProcStatus does not have:
// State, Umask, TracerPid, Groups, the signal masks (SigPnd, ShdPnd,
// SigBlk, SigIgn, SigCgt), NoNewPrivs, Seccomp, untag_mask and
// x86_Thread_features.
func parseStatus(b []byte) (*Status, error) {
	s := &Status{UntagMask: ^uint64(0)}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		var err error
		hex := func(dst *uint64) { *dst, err = strconv.ParseUint(v, 16, 64) }
		switch k {
		case "State":
			if v == "" {
				err = fmt.Errorf("empty")
			} else {
				s.State = v[0]
			}
		case "Umask":
			var u uint64
			u, err = strconv.ParseUint(v, 8, 32)
			s.Umask = int(u)
		case "TracerPid":
			var pid int
			pid, err = strconv.Atoi(v)
			s.TracerPID = sys.PID(pid)
		case "Groups":
			for _, f := range strings.Fields(v) {
				g, e := strconv.Atoi(f)
				if e != nil {
					err = e
					break
				}
				s.Groups = append(s.Groups, g)
			}
		case "SigPnd":
			hex(&s.SigPnd)
		case "ShdPnd":
			hex(&s.ShdPnd)
		case "SigBlk":
			hex(&s.SigBlk)
		case "SigIgn":
			hex(&s.SigIgn)
		case "SigCgt":
			hex(&s.SigCgt)
		case "NoNewPrivs":
			var n int
			n, err = strconv.Atoi(v)
			s.NoNewPrivs = n == 1
		case "Seccomp":
			s.Seccomp, err = strconv.Atoi(v)
		case "untag_mask":
			s.UntagMask, err = strconv.ParseUint(v, 0, 64)
		case "x86_Thread_features":
			s.X86ThreadFeatures = v
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("field %s %q: %w", k, v, err)
		}
		seen[k] = true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// Every kernel ckpt runs on writes these: a status without one of them
	// is refused rather than read as zero.
	for _, k := range []string{"State", "Umask", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt", "NoNewPrivs"} {
		if !seen[k] {
			return nil, fmt.Errorf("no %s field", k)
		}
	}
	return s, nil
}

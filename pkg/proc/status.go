package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// Status is the part of /proc/PID/status ckpt uses.
type Status struct {
	TGID                                   sys.PID
	UID, GID                               [4]int // real, effective, saved, fs
	CapInh, CapPrm, CapEff, CapBnd, CapAmb uint64
	VmLck                                  uint64 // locked memory, bytes (0 without memory: a zombie)

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

// readStatus reads the status of id (a PID or a TID) under root, in one
// read of the file (see parseStatus).
func readStatus(root string, id int) (*Status, error) {
	path := filepath.Join(root, strconv.Itoa(id), "status")
	b, err := readSmall(path, make([]byte, 2048))
	if err != nil {
		return nil, err
	}
	s, err := parseStatus(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// parseStatus parses the fields of Status. It is an own parser although
// procfs.ProcStatus has some of them (Tgid, the IDs, capabilities, VmLck):
// a dump reads the status of every thread while the tree is frozen, and
// procfs reads the file on its own (after a stat of /proc and of the
// process's directory), so that the fields it lacks (State, Umask,
// TracerPid, Groups, the signal masks, NoNewPrivs, Seccomp, untag_mask,
// x86_Thread_features) cost a second read: the kernel builds a status
// file anew on every read, which is the dearest part of a thread's dump.
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
		case "Tgid":
			var pid int
			pid, err = strconv.Atoi(v)
			s.TGID = sys.PID(pid)
		case "Uid":
			err = ids(v, &s.UID)
		case "Gid":
			err = ids(v, &s.GID)
		case "CapInh":
			hex(&s.CapInh)
		case "CapPrm":
			hex(&s.CapPrm)
		case "CapEff":
			hex(&s.CapEff)
		case "CapBnd":
			hex(&s.CapBnd)
		case "CapAmb":
			hex(&s.CapAmb)
		case "VmLck":
			kb, unit, _ := strings.Cut(v, " ")
			if unit != "kB" {
				err = fmt.Errorf("unit %q, want kB", unit)
				break
			}
			s.VmLck, err = strconv.ParseUint(kb, 10, 64)
			s.VmLck *= 1024
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
	// is refused rather than read as zero. A zombie (a dead leader of
	// threads that run on) has let its fs go, and with it the Umask line.
	for _, k := range []string{"Tgid", "Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
		"State", "Umask", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt", "NoNewPrivs"} {
		if !seen[k] && !(k == "Umask" && (s.State == 'Z' || s.State == 'X')) {
			return nil, fmt.Errorf("no %s field", k)
		}
	}
	return s, nil
}

// ids parses a Uid or Gid line: real, effective, saved and file-system IDs.
func ids(v string, dst *[4]int) error {
	f := strings.Fields(v)
	if len(f) != 4 {
		return fmt.Errorf("%d IDs, want 4", len(f))
	}
	for i := range f {
		n, err := strconv.Atoi(f[i])
		if err != nil {
			return err
		}
		dst[i] = n
	}
	return nil
}

package proc

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
)

// FDInfo holds the fields of /proc/PID/fdinfo/FD.
type FDInfo struct {
	// From procfs.ProcFDInfo.
	Pos     int64
	Flags   int // octal in the file
	MntID   int
	Ino     uint64
	Inotify []InotifyWatch

	// Extra holds the other "key: value" lines (eventfd-count, clockid,
	// sigmask, Pid...), Lines every line; the typed views (Eventfd,
	// Timerfd, Signalfd, EpollItems, PidfdPID) parse them.
	Extra map[string]string
	Lines []string
}

// InotifyWatch is one watch of an inotify fd (procfs.InotifyInfo, in
// numbers).
type InotifyWatch struct {
	WD   int
	Ino  uint64
	Sdev uint64
	Mask uint32
}

// ReadFDInfo parses /proc/PID/fdinfo/FD.
func ReadFDInfo(pid sys.PID, fd sys.TargetFD) (*FDInfo, error) { return readFDInfo(root, pid, fd) }

func readFDInfo(root string, pid sys.PID, fd sys.TargetFD) (*FDInfo, error) {
	p, err := procOf(root, int(pid))
	if err != nil {
		return nil, err
	}
	pi, err := p.FDInfo(fd.String())
	if err != nil {
		return nil, err
	}
	fi := &FDInfo{}
	wrap := func(field string, err error) error {
		return fmt.Errorf("%s/%d/fdinfo/%d: %s: %w", root, pid, fd, field, err)
	}
	if fi.Pos, err = strconv.ParseInt(pi.Pos, 10, 64); err != nil {
		return nil, wrap("pos", err)
	}
	flags, err := strconv.ParseUint(pi.Flags, 8, 32)
	if err != nil {
		return nil, wrap("flags", err)
	}
	fi.Flags = int(flags)
	if fi.MntID, err = strconv.Atoi(pi.MntID); err != nil {
		return nil, wrap("mnt_id", err)
	}
	if fi.Ino, err = strconv.ParseUint(pi.Ino, 10, 64); err != nil {
		return nil, wrap("ino", err)
	}
	for _, w := range pi.InotifyInfos {
		iw, err := inotifyWatch(w.WD, w.Ino, w.Sdev, w.Mask)
		if err != nil {
			return nil, wrap("inotify", err)
		}
		fi.Inotify = append(fi.Inotify, iw)
	}
	b, err := ReadFile(filepath.Join(root, pid.String(), "fdinfo", fd.String()))
	if err != nil {
		return nil, err
	}
	fi.Extra, fi.Lines = parseFDInfoLines(b)
	return fi, nil
}

func inotifyWatch(wd, ino, sdev, mask string) (InotifyWatch, error) {
	var w InotifyWatch
	v, err := strconv.ParseInt(wd, 16, 32)
	if err != nil {
		return w, err
	}
	w.WD = int(v)
	if w.Ino, err = strconv.ParseUint(ino, 16, 64); err != nil {
		return w, err
	}
	if w.Sdev, err = strconv.ParseUint(sdev, 16, 64); err != nil {
		return w, err
	}
	m, err := strconv.ParseUint(mask, 16, 32)
	w.Mask = uint32(m)
	return w, err
}

// parseFDInfoLines keeps the lines procfs.ProcFDInfo drops (it has pos,
// flags, mnt_id, ino and inotify only): every other "key: value" line in
// Extra, and every line as is.
func parseFDInfoLines(b []byte) (map[string]string, []string) {
	extra := map[string]string{}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for _, line := range lines {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "pos", "flags", "mnt_id", "ino":
		default:
			extra[k] = strings.TrimSpace(v)
		}
	}
	return extra, lines
}

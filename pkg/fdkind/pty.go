package fdkind

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// ptmx is the master side of a pseudo-terminal (an fd of /dev/ptmx). The
// pair is rebuilt with the same index (/dev/pts/N), settings (termios,
// window size, packet mode, lock, exclusive mode), the bytes queued in
// both directions, and the session whose controlling terminal it is
// (pkg/restore makes it so). The slaves of a master in the dump are tty
// files carrying the pair's state too (File.Pty), reopened at
// /dev/pts/N; a slave whose master is outside is a terminal from outside
// (--shell-job).
func ptmx() Kind {
	return Kind{
		Name:     image.FilePtmx,
		Match:    func(s *Source) bool { return s.Type() == unix.S_IFCHR && isPtmx(s.Stat.Rdev) },
		Describe: describePtmx,
		Finish:   linkPtys,
		Open:     openPtmx,
		Steps:    lockPtmx,
		Show:     showPty,
	}
}

func isPtmx(rdev uint64) bool { return unix.Major(rdev) == 5 && unix.Minor(rdev) == 2 }

// ptsIndex returns N of a /dev/pts/N path, or -1.
func ptsIndex(path string) int {
	s, ok := strings.CutPrefix(path, "/dev/pts/")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// isPts reports a pseudo-terminal slave device.
func isPts(rdev uint64) bool { maj := unix.Major(rdev); return maj >= 136 && maj <= 143 }

func describePtmx(env DumpEnv, s *Source, f *image.File) error {
	f.Ref = StatRef(s.Link, &s.Stat)
	f.Rdev = s.Stat.Rdev
	if s.Copy < 0 {
		return fmt.Errorf("pseudo-terminal master: no copy of it to ask: %w", ErrUnsupported)
	}
	fd := s.Copy
	idx, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		return fmt.Errorf("pseudo-terminal master: TIOCGPTN: %w", err)
	}
	p := &image.Pty{Index: idx, Master: true}
	what := fmt.Sprintf("pseudo-terminal master of /dev/pts/%d", idx)
	// The queues are read and put back through the default line
	// discipline (N_TTY) on both sides.
	if ld, err := unix.IoctlGetInt(fd, unix.TIOCGETD); err != nil || ld != nTTY {
		return fmt.Errorf("%s: line discipline %d (%v): cannot be restored: %w", what, ld, err, ErrUnsupported)
	}
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS2)
	if err != nil {
		return fmt.Errorf("%s: TCGETS2: %w", what, err)
	}
	p.Termios = termiosToImage(t)
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return fmt.Errorf("%s: TIOCGWINSZ: %w", what, err)
	}
	p.Winsize = [4]uint16{ws.Row, ws.Col, ws.Xpixel, ws.Ypixel}
	pkt, err := unix.IoctlGetInt(fd, unix.TIOCGPKT)
	if err != nil {
		return fmt.Errorf("%s: TIOCGPKT: %w", what, err)
	}
	p.Packet = pkt != 0
	lck, err := unix.IoctlGetInt(fd, unix.TIOCGPTLCK)
	if err != nil {
		return fmt.Errorf("%s: TIOCGPTLCK: %w", what, err)
	}
	p.Locked = lck != 0
	// poll on the master: POLLHUP once every fd of the slave is closed;
	// POLLPRI in packet mode while a status event waits to be read.
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI}}
	if _, err := unix.Poll(pfd, 0); err != nil {
		return fmt.Errorf("%s: poll: %w", what, err)
	}
	if p.Packet && pfd[0].Revents&unix.POLLPRI != 0 {
		return fmt.Errorf("%s: a packet-mode status event waits to be read: cannot be restored: %w", what, ErrUnsupported)
	}
	p.SlaveClosed = pfd[0].Revents&unix.POLLHUP != 0
	if sid, err := unix.IoctlGetInt(fd, unix.TIOCGSID); err == nil && sid > 0 {
		p.Session = sys.PID(sid)
		if pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && pg > 0 {
			p.Foreground = sys.PID(pg)
		}
	}
	f.Pty = p
	return nil
}

func termiosToImage(t *unix.Termios) image.Termios {
	return image.Termios{Iflag: t.Iflag, Oflag: t.Oflag, Cflag: t.Cflag, Lflag: t.Lflag, Line: t.Line, CC: t.Cc, Ispeed: t.Ispeed, Ospeed: t.Ospeed}
}

func termiosFromImage(t image.Termios) *unix.Termios {
	return &unix.Termios{Iflag: t.Iflag, Oflag: t.Oflag, Cflag: t.Cflag, Lflag: t.Lflag, Line: t.Line, Cc: t.CC, Ispeed: t.Ispeed, Ospeed: t.Ospeed}
}

// ptyHeld is a master of the dump and the slave fds of the dump that
// belong to it.
type ptyHeld struct {
	master Held
	slaves []Held
}

// linkPtys gives every slave of the dump whose master is in the dump the
// pair's state, checks what the restore needs (no slave open outside the
// dump; the session whose controlling terminal it is led from inside;
// every process of that session has it), and reads the bytes queued in
// both directions, putting them back at once (a tty cannot be read
// without consuming: see ptyQueues).
func linkPtys(env DumpEnv, fds []Held) error {
	pairs := map[int]*ptyHeld{}
	var order []int
	for _, h := range fds {
		if h.File.Kind == image.FilePtmx && h.File.Pty != nil {
			if _, ok := pairs[h.File.Pty.Index]; !ok {
				pairs[h.File.Pty.Index] = &ptyHeld{master: h}
				order = append(order, h.File.Pty.Index)
			}
		}
	}
	var devTTY []Held
	for _, h := range fds {
		if h.File.Kind != image.FileTTY {
			continue
		}
		if p := h.File.Pty; p != nil && p.DevTTY {
			if pairs[p.Index] != nil {
				devTTY = append(devTTY, h)
			} else {
				h.File.Pty = nil // a terminal from outside
			}
			continue
		}
		if !isPts(h.File.Rdev) {
			continue
		}
		if p := h.File.Pty; p != nil && p.HungUp {
			if pairs[p.Index] != nil {
				return fmt.Errorf("process %d fd %d: hung-up slave of /dev/pts/%d, whose index a pseudo-terminal of the dump has now: cannot be restored: %w",
					h.PID, h.FD, p.Index, ErrUnsupported)
			}
			continue
		}
		if pp := pairs[ptsIndex(h.File.Ref.Path)]; pp != nil {
			pp.slaves = append(pp.slaves, h)
		}
	}
	inDump := map[sys.PID]bool{}
	for _, h := range fds {
		inDump[h.PID] = true
	}
	for _, idx := range order {
		pp := pairs[idx]
		p := pp.master.File.Pty
		name := fmt.Sprintf("process %d fd %d: pseudo-terminal master of /dev/pts/%d", pp.master.PID, pp.master.FD, idx)
		if len(pp.slaves) > 0 {
			p.SlaveClosed = false
		}
		if holder := ptsOpenElsewhere(idx, inDump); holder != "" {
			return fmt.Errorf("%s: its slave is open in %s, outside the dump: cannot be restored: %w", name, holder, ErrUnsupported)
		}
		if err := ptsInode(p, pp.slaves); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if p.Session != 0 && !env.InDump(p.Session) {
			return fmt.Errorf("%s: it is the controlling terminal of session %d, whose leader is outside the dump: cannot be restored: %w",
				name, p.Session, ErrUnsupported)
		}
		if p.Foreground != 0 && unix.Kill(-int(p.Foreground), 0) == unix.ESRCH {
			return fmt.Errorf("%s: its foreground process group %d has no process left: cannot be restored: %w", name, p.Foreground, ErrUnsupported)
		}
		if err := checkCtty(p, fds); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := ptyQueues(env, pp, p); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, s := range pp.slaves {
			c := *p
			c.Master = false
			s.File.Pty = &c
		}
	}
	for _, h := range devTTY {
		c := *pairs[h.File.Pty.Index].master.File.Pty
		c.Master, c.DevTTY = false, true
		h.File.Pty = &c
	}
	return nil
}

// ptsInode records the owner and mode of /dev/pts/N, checking first that
// ckpt sees the same pty there as the dump's slaves (a pty of another
// devpts instance, a container's, is refused: the restore reopens
// /dev/pts/N).
func ptsInode(p *image.Pty, slaves []Held) error {
	path := fmt.Sprintf("/dev/pts/%d", p.Index)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("%s: %v: a pty of another devpts instance: cannot be restored: %w", path, err, ErrUnsupported)
	}
	for _, s := range slaves {
		if s.File.Ref.Dev != st.Dev || s.File.Rdev != st.Rdev {
			return fmt.Errorf("process %d fd %d: the slave is not ckpt's %s: a pty of another devpts instance: cannot be restored: %w",
				s.PID, s.FD, path, ErrUnsupported)
		}
	}
	p.UID, p.GID, p.Mode = int(st.Uid), int(st.Gid), st.Mode&0o7777
	return nil
}

// checkCtty refuses a session in which some processes have the pty as
// their controlling terminal and others none (they were forked before
// their leader took it): the restore gives it to every process of the
// session.
func checkCtty(p *image.Pty, fds []Held) error {
	if p.Session == 0 {
		return nil
	}
	seen := map[sys.PID]bool{}
	for _, h := range fds {
		if seen[h.PID] {
			continue
		}
		seen[h.PID] = true
		st, err := proc.ReadStat(h.PID, 0)
		if err != nil {
			return err
		}
		if st.Session == p.Session && st.TTY == 0 {
			return fmt.Errorf("process %d is in session %d but has no controlling terminal, while the session's is this one: cannot be restored: %w",
				h.PID, p.Session, ErrUnsupported)
		}
	}
	return nil
}

// ptsOpenElsewhere names a process outside the dump (not ckpt itself)
// that has /dev/pts/idx open, or "".
func ptsOpenElsewhere(idx int, inDump map[sys.PID]bool) string {
	return ptyHolder(idx, inDump, false)
}

// ptyHolder names a process outside inDump (not ckpt itself) holding
// the slave /dev/pts/idx, or, if masters is set, its master; or "".
func ptyHolder(idx int, inDump map[sys.PID]bool, masters bool) string {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return ""
	}
	want := fmt.Sprintf("/dev/pts/%d", idx)
	self := sys.Getpid()
	for _, e := range procs {
		n, err := strconv.Atoi(e.Name())
		pid := sys.PID(n)
		if err != nil || inDump[pid] || pid == self {
			continue
		}
		fds, err := os.ReadDir(proc.Path(pid, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(proc.Path(pid, "fd", fd.Name()))
			if err != nil {
				continue
			}
			what := ""
			switch {
			case l == want:
				what = "slave"
			case masters && (l == "/dev/ptmx" || l == "/dev/pts/ptmx"):
				n, err := strconv.Atoi(fdInfoField(pid, fd.Name(), "tty-index"))
				if err == nil && n == idx {
					what = "master"
				}
			}
			if what != "" {
				comm, _ := os.ReadFile(proc.Path(pid, "comm"))
				return fmt.Sprintf("process %d (%s) fd %s, the %s", pid, strings.TrimSpace(string(comm)), fd.Name(), what)
			}
		}
	}
	return ""
}

// fdInfoField returns one field of /proc/PID/fdinfo/FD, or "".
func fdInfoField(pid sys.PID, fd, key string) string {
	n, err := strconv.Atoi(fd)
	if err != nil {
		return ""
	}
	fi, err := proc.ReadFDInfo(pid, sys.TargetFD(n))
	if err != nil {
		return ""
	}
	return fi.Extra[key]
}

func showPty(f *image.File) string {
	p := f.Pty
	if p == nil {
		return f.Ref.Path
	}
	if p.DevTTY {
		return fmt.Sprintf("/dev/tty: the controlling terminal /dev/pts/%d (master in the dump)", p.Index)
	}
	if !p.Master {
		return fmt.Sprintf("pty slave /dev/pts/%d (master in the dump)", p.Index)
	}
	d := fmt.Sprintf("pty master of /dev/pts/%d", p.Index)
	var attrs []string
	attrs = append(attrs, fmt.Sprintf("%dx%d", p.Winsize[1], p.Winsize[0]))
	if p.Session != 0 {
		attrs = append(attrs, fmt.Sprintf("terminal of session %d, foreground group %d", p.Session, p.Foreground))
	}
	if p.Packet {
		attrs = append(attrs, "packet mode")
	}
	if p.Locked {
		attrs = append(attrs, "locked")
	}
	if p.Exclusive {
		attrs = append(attrs, "exclusive")
	}
	if p.SlaveClosed {
		attrs = append(attrs, "slave closed")
	}
	if p.InputID != 0 {
		attrs = append(attrs, "input queued")
	}
	if p.OutputID != 0 {
		attrs = append(attrs, "output queued")
	}
	return d + " (" + strings.Join(attrs, ", ") + ")"
}

// ErrPtyTaken means the index of a pty of the image is in use at restore.
var ErrPtyTaken = errors.New("pty index taken")

// ptyKey names the rebuilt pair of an index.
type ptyKey int

// ptyPair is a rebuilt pseudo-terminal: ckpt-redo's master.
type ptyPair struct{ master *os.File }

func openPtmx(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	pp, err := restorePair(env, f)
	if err != nil {
		return Desc{}, err
	}
	d, err := dupFile(pp.master)
	return Desc{File: d}, err
}

// openPts opens a slave whose master is in the dump, once the pair is
// rebuilt.
func openPts(env RestoreEnv, f *image.File) (Desc, error) {
	if _, err := restorePair(env, f); err != nil {
		return Desc{}, err
	}
	path := fmt.Sprintf("/dev/pts/%d", f.Pty.Index)
	fd, err := unix.Open(path, f.Flags&unix.O_ACCMODE|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return Desc{}, fmt.Errorf("open %s: %w", path, err)
	}
	return Desc{File: os.NewFile(uintptr(fd), path)}, nil
}

func restorePair(env RestoreEnv, f *image.File) (*ptyPair, error) {
	if f.Pty == nil {
		return nil, fmt.Errorf("pty without its state: %w", image.ErrCorrupt)
	}
	v, err := env.Once(ptyKey(f.Pty.Index), func() (any, error) { return makePair(env, f.Pty) })
	if err != nil {
		return nil, fmt.Errorf("pty /dev/pts/%d: %w", f.Pty.Index, err)
	}
	return v.(*ptyPair), nil
}

// makePair opens /dev/ptmx until the kernel hands out the wanted index
// (it gives the lowest free one: the ones below are held meanwhile and
// closed after), then gives the pair its settings and queued bytes. The
// lock comes last, in the process (lockPtmx), once every slave is open.
func makePair(env RestoreEnv, p *image.Pty) (*ptyPair, error) {
	path := fmt.Sprintf("/dev/pts/%d", p.Index)
	master, err := ptmxAt(p.Index)
	if err != nil {
		return nil, err
	}
	mf := master.File("/dev/ptmx")
	env.Keep(mf)
	if err := unix.Chown(path, p.UID, p.GID); err != nil {
		return nil, fmt.Errorf("chown %s %d:%d: %w", path, p.UID, p.GID, err)
	}
	if err := unix.Chmod(path, p.Mode); err != nil {
		return nil, fmt.Errorf("chmod %s %#o: %w", path, p.Mode, err)
	}
	if err := settlePair(env, int(mf.Fd()), p); err != nil {
		return nil, err
	}
	return &ptyPair{master: mf}, nil
}

// hungUpKey names the pair made again for hung-up slaves of one index.
type hungUpKey int

// openHungUp opens a slave whose master was closed: a pair of the same
// index is made (once), each such description opened on its slave, and
// the master, kept by ckpt-redo, closes at the end of the restore, before
// the processes run: the slaves hang up as they had, and /dev/pts/N goes
// away again.
func openHungUp(env RestoreEnv, f *image.File) (Desc, error) {
	p := f.Pty
	path := fmt.Sprintf("/dev/pts/%d", p.Index)
	_, err := env.Once(hungUpKey(p.Index), func() (any, error) {
		master, err := ptmxAt(p.Index)
		if err != nil {
			return nil, err
		}
		mf := master.File("/dev/ptmx")
		env.Keep(mf)
		if err := unix.IoctlSetPointerInt(int(mf.Fd()), unix.TIOCSPTLCK, 0); err != nil {
			return nil, fmt.Errorf("unlock %s: %w", path, err)
		}
		if err := unix.Chown(path, p.UID, p.GID); err != nil {
			return nil, fmt.Errorf("chown %s %d:%d: %w", path, p.UID, p.GID, err)
		}
		return mf, unix.Chmod(path, p.Mode)
	})
	if err != nil {
		return Desc{}, fmt.Errorf("hung-up pty %s: %w", path, err)
	}
	fd, err := unix.Open(path, f.Flags&unix.O_ACCMODE|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return Desc{}, fmt.Errorf("open %s: %w", path, err)
	}
	return Desc{File: os.NewFile(uintptr(fd), path)}, nil
}

// ptmxAt opens /dev/ptmx until the kernel hands out the wanted index
// (it gives the lowest free one: the ones below are held meanwhile and
// closed after).
func ptmxAt(index int) (*sys.FD, error) {
	path := fmt.Sprintf("/dev/pts/%d", index)
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("the index is in use: %s exists%s: %w", path, ptsHolder(index), ErrPtyTaken)
	}
	var held []*sys.FD
	defer func() {
		for _, fd := range held {
			fd.Close()
		}
	}()
	var master *sys.FD
	for len(held) <= index {
		fd, err := sys.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		held = append(held, fd)
		n, err := unix.IoctlGetInt(fd.Int(), unix.TIOCGPTN)
		if err != nil {
			return nil, fmt.Errorf("TIOCGPTN: %w", err)
		}
		if n == index {
			master = fd
			held = held[:len(held)-1]
			break
		}
		if n > index {
			return nil, fmt.Errorf("the index is in use: the kernel handed out /dev/pts/%d instead%s: %w", n, ptsHolder(index), ErrPtyTaken)
		}
	}
	if master == nil {
		return nil, fmt.Errorf("%s never came: %w", path, ErrPtyTaken)
	}
	return master, nil
}

// settlePair gives a new, unlocked pair the dumped settings and data.
func settlePair(env RestoreEnv, master int, p *image.Pty) error {
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	t := termiosFromImage(p.Termios)
	if err := unix.IoctlSetTermios(master, unix.TCSETS2, t); err != nil {
		return fmt.Errorf("TCSETS2: %w", err)
	}
	ws := &unix.Winsize{Row: p.Winsize[0], Col: p.Winsize[1], Xpixel: p.Winsize[2], Ypixel: p.Winsize[3]}
	if err := unix.IoctlSetWinsize(master, unix.TIOCSWINSZ, ws); err != nil {
		return fmt.Errorf("TIOCSWINSZ: %w", err)
	}
	// A slave of ours, for what only a slave fd does; closing it leaves
	// the master as after a closed slave, which is what SlaveClosed says
	// (the slaves of the dump are opened after).
	if p.InputID != 0 || p.Exclusive || p.SlaveClosed {
		path := fmt.Sprintf("/dev/pts/%d", p.Index)
		sf, err := sys.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer sf.Close()
		slave := sf.Int()
		if p.InputID != 0 {
			in, err := env.Data(p.InputID)
			if err != nil {
				return fmt.Errorf("queued input: %w", err)
			}
			if err := putInput(master, slave, t, in); err != nil {
				return err
			}
		}
		if p.Exclusive {
			if err := unix.IoctlSetInt(slave, unix.TIOCEXCL, 0); err != nil {
				return fmt.Errorf("TIOCEXCL: %w", err)
			}
		}
	}
	if p.OutputID != 0 {
		out, err := env.Data(p.OutputID)
		if err != nil {
			return fmt.Errorf("queued output: %w", err)
		}
		if err := stuff(master, out); err != nil {
			return fmt.Errorf("queued output: %w", err)
		}
	}
	if p.Packet {
		if err := unix.IoctlSetPointerInt(master, unix.TIOCPKT, 1); err != nil {
			return fmt.Errorf("TIOCPKT: %w", err)
		}
	}
	return nil
}

// ptsHolder names who holds /dev/pts/N, for the message of a taken index.
func ptsHolder(idx int) string {
	if h := ptyHolder(idx, nil, true); h != "" {
		return " (held by " + h + ")"
	}
	return ""
}

// lockPtmx locks a restored master that was locked (TIOCSPTLCK), in the
// process holding it, once every slave of the dump is open.
func lockPtmx(t Target, p *image.Process, f *image.File) error {
	if f.Pty == nil || !f.Pty.Locked {
		return nil
	}
	i := slices.IndexFunc(p.FDs, func(e image.FD) bool { return e.File == f.ID })
	if i < 0 {
		return nil
	}
	one := []byte{1, 0, 0, 0}
	addr, err := t.Scratch(one)
	if err != nil {
		return err
	}
	_, err = t.Call("ioctl TIOCSPTLCK", unix.SYS_IOCTL, uint64(p.FDs[i].FD), unix.TIOCSPTLCK, addr)
	return err
}

// pidfdCopy returns ckpt's own fd of fd of process pid (or of the
// process of thread pid: where the leader has exited, the dump names a
// live thread).
func pidfdCopy(pid sys.PID, fd sys.TargetFD) (*sys.FD, error) {
	pidfd, err := sys.PidfdOpen(pid, 0)
	if errors.Is(err, unix.EINVAL) {
		pidfd, err = sys.PidfdOpen(pid, unix.PIDFD_THREAD)
	}
	if err != nil {
		return nil, err
	}
	defer pidfd.Close()
	return sys.PidfdGetfd(pidfd, fd)
}

package restore

import (
	"fmt"
	"os"
	"sort"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// Controlling terminals. A pseudo-terminal of the dump that was the
// controlling terminal of a session (image.Pty.Session, whose leader is in
// the dump: the dump refuses otherwise) becomes it again: the session
// leader itself calls TIOCSCTTY on a slave fd right after its setsid,
// before it forks the rest of its session, who inherit it (the dump
// refuses a session where some processes lack it); once the process
// groups exist, the leader gives the terminal its foreground group
// (TIOCSPGRP). The slave fd is one of the dump's descriptions of it
// passed through the helper, or one ckpt-redo opens for the purpose.

// ctty is the controlling terminal of a session being restored.
type ctty struct {
	index      int          // /dev/pts/N
	fd         sys.TargetFD // a slave fd in the new processes (passed)
	foreground sys.PID
}

// prepareCtty finds or opens, for each session of the image with a
// controlling terminal, a slave fd the leader can make it its own
// with. It runs after prepareFiles (the pairs exist) and before the
// tree is created.
func (t *tree) prepareCtty() error {
	ids := make([]int, 0, len(t.files))
	for id := range t.files {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		f := t.files[id]
		p := f.Pty
		if f.Kind != image.FilePtmx || p == nil || p.Session == 0 {
			continue
		}
		if _, ok := t.byPID[p.Session]; !ok {
			return fmt.Errorf("pty /dev/pts/%d: the leader of its session %d is not in the image: %w", p.Index, p.Session, image.ErrCorrupt)
		}
		c := ctty{index: p.Index, fd: -1, foreground: p.Foreground}
		for _, sid := range ids {
			s := t.files[sid]
			if fd, ok := t.fileFD[sid]; ok && s.Kind == image.FileTTY && s.Pty != nil && s.Pty.Index == p.Index && !t.foreign[sid] {
				c.fd = fd
				break
			}
		}
		if c.fd < 0 {
			path := fmt.Sprintf("/dev/pts/%d", p.Index)
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("controlling terminal of session %d: open %s: %w", p.Session, path, err)
			}
			c.fd = t.pass(os.NewFile(uintptr(fd), path), true)
		}
		if t.ctty == nil {
			t.ctty = map[sys.PID]ctty{}
		}
		t.ctty[p.Session] = c
	}
	return nil
}

// takeCtty makes the terminal of b's session b's controlling terminal;
// b has just called setsid.
func (t *tree) takeCtty(b *builder) error {
	c, ok := t.ctty[b.p.PID]
	if !ok {
		return nil
	}
	if _, err := b.call(fmt.Sprintf("ioctl TIOCSCTTY /dev/pts/%d", c.index), unix.SYS_IOCTL, uint64(c.fd), unix.TIOCSCTTY, 0); err != nil {
		return fmt.Errorf("process %d: %w", b.p.PID, err)
	}
	return nil
}

// foregrounds gives each restored controlling terminal its foreground
// process group, from its session leader, once every group exists; then
// checks that every process of those sessions has the terminal.
func (t *tree) foregrounds() error {
	for sid, c := range t.ctty {
		b := t.byPID[sid]
		if c.foreground != 0 && c.foreground != sid {
			pg := []byte{byte(c.foreground), byte(c.foreground >> 8), byte(c.foreground >> 16), byte(c.foreground >> 24)}
			if err := ptrace.WriteMem(b.target, b.scratch, pg); err != nil {
				return err
			}
			if _, err := b.call(fmt.Sprintf("ioctl TIOCSPGRP /dev/pts/%d %d", c.index, c.foreground), unix.SYS_IOCTL, uint64(c.fd), unix.TIOCSPGRP, b.scratch); err != nil {
				return fmt.Errorf("process %d: %w", sid, err)
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/dev/pts/%d", c.index), &st); err != nil {
			return err
		}
		for _, m := range t.procs {
			if m.p.SID != sid || m.p.Zombie || m.target == 0 {
				continue
			}
			ps, err := proc.ReadStat(m.target, 0)
			if err != nil {
				return fmt.Errorf("process %d: %w", m.p.PID, err)
			}
			if uint64(ps.TTY) != st.Rdev {
				return fmt.Errorf("process %d: controlling terminal %#x, want /dev/pts/%d (%#x)", m.p.PID, ps.TTY, c.index, st.Rdev)
			}
		}
	}
	return nil
}

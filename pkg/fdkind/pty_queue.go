package fdkind

import (
	"errors"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// The bytes queued in a pseudo-terminal are in its two line disciplines:
// the slave's (written to the master, not read from the slave yet: its
// input) and the master's (written to the slave, not read from the master
// yet: its output). A terminal has no way to read without consuming
// (no MSG_PEEK, no tee), so the dump reads them while the tree is frozen
// and at once puts them back the way the restore does: with TIOCSTI,
// which hands bytes to the line discipline as if they had just been
// received, synchronously, under settings that do not process them a
// second time (no echo, no signals, no CR/NL mapping) but keep the
// canonical mode, so that a partial line stays partial.
//
// Limits: a line discipline holds 4095 bytes; a dump finding that much
// queued refuses before reading (more may wait behind), but in canonical
// mode the kernel counts only complete lines, so a partial line that
// fills the buffer is not seen (and bytes past it would be lost). An
// end-of-file character queued in canonical mode comes back as a NUL
// byte. A master whose slave was never opened is refused: bytes written
// to it can only be read through an open of the slave, and its close
// leaves the master hung up for good (read EIO, poll POLLHUP). Output
// stopped by flow control (^S) is not saved.

// nTTY is the default line discipline (N_TTY, which x/sys/unix does not
// name).
const nTTY = 0

// ttyBufMax is what a line discipline holds (N_TTY_BUF_SIZE - 1).
const ttyBufMax = 4095

// errQueueFull is a queue the dump cannot read whole.
var errQueueFull = errors.New("queue full")

// ptyQueues reads the bytes queued in both directions of a pair of the
// dump, records them in p and puts them back, and records the slave's
// exclusive mode. The slave is reached through a copy of one of the
// dump's fds of it, or, if every fd of it was closed, a new open.
func ptyQueues(env DumpEnv, pp *ptyHeld, p *image.Pty) error {
	mc, err := pidfdCopy(pp.master.PID, pp.master.FD)
	if err != nil {
		return fmt.Errorf("copy of the master: %w", err)
	}
	defer mc.Close()
	master := mc.Int()
	slave := -1
	switch {
	case len(pp.slaves) > 0:
		s := pp.slaves[0]
		sc, err := pidfdCopy(s.PID, s.FD)
		if err != nil {
			return fmt.Errorf("copy of the slave (process %d fd %d): %w", s.PID, s.FD, err)
		}
		defer sc.Close()
		slave = sc.Int()
	case p.SlaveClosed:
		if p.Locked {
			if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
				return fmt.Errorf("unlock: %w", err)
			}
			defer unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 1)
		}
		path := fmt.Sprintf("/dev/pts/%d", p.Index)
		fd, err := sys.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer fd.Close()
		slave = fd.Int()
	default:
		// Never opened: bytes written to the master wait in the slave's
		// line discipline, and only an open of the slave reaches them,
		// whose close would leave the master hung up for good.
		return fmt.Errorf("its slave was never opened: what was written to the master cannot be read without changing the terminal: cannot be restored: %w", ErrUnsupported)
	}
	t := termiosFromImage(p.Termios)
	if slave >= 0 {
		if ld, err := unix.IoctlGetInt(slave, unix.TIOCGETD); err != nil || ld != nTTY {
			return fmt.Errorf("the slave's line discipline is %d (%v): cannot be restored: %w", ld, err, ErrUnsupported)
		}
		ex, err := unix.IoctlGetInt(slave, unix.TIOCGEXCL)
		if err != nil {
			return fmt.Errorf("TIOCGEXCL: %w", err)
		}
		p.Exclusive = ex != 0
		in, err := takeInput(master, slave, t)
		if err != nil {
			return fmt.Errorf("input queued towards the slave: %w", err)
		}
		if len(in) > 0 {
			p.InputID = env.AddData(in)
			if err := putInput(master, slave, t, in); err != nil {
				return fmt.Errorf("put back %d bytes of input queued towards the slave: %w", len(in), err)
			}
		}
	}
	out, err := takeOutput(master, p.Packet)
	if err != nil {
		return fmt.Errorf("output queued towards the master: %w", err)
	}
	if len(out) > 0 {
		p.OutputID = env.AddData(out)
		if err := stuff(master, out); err != nil {
			return fmt.Errorf("put back %d bytes of output queued towards the master: %w", len(out), err)
		}
	}
	if p.Packet {
		if err := unix.IoctlSetPointerInt(master, unix.TIOCPKT, 1); err != nil {
			return fmt.Errorf("TIOCPKT: %w", err)
		}
	}
	return nil
}

// takeInput reads the slave's input queue whole: in canonical mode the
// terminal is switched to non-canonical for the read, which makes the
// partial line readable too. The settings stay so until putInput.
func takeInput(master, slave int, t *unix.Termios) ([]byte, error) {
	if n, err := unix.IoctlGetInt(slave, unix.TIOCINQ); err == nil && n >= ttyBufMax {
		return nil, fmt.Errorf("%d bytes or more: cannot be restored: %w: %w", n, errQueueFull, ErrUnsupported)
	}
	if t.Lflag&unix.ICANON != 0 {
		raw := *t
		raw.Lflag &^= unix.ICANON
		raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 0, 0
		if err := unix.IoctlSetTermios(master, unix.TCSETS2, &raw); err != nil {
			return nil, fmt.Errorf("TCSETS2: %w", err)
		}
	}
	b, err := readAll(slave)
	if err != nil || len(b) == 0 {
		if e := unix.IoctlSetTermios(master, unix.TCSETS2, t); e != nil && err == nil {
			err = fmt.Errorf("TCSETS2: %w", e)
		}
	}
	return b, err
}

// putInput hands data to the slave's line discipline as received input,
// without echoing or interpreting it again, then gives the terminal its
// settings t back. The canonical mode is left as t has it throughout, so
// that switching back keeps a partial line partial.
func putInput(master, slave int, t *unix.Termios, data []byte) error {
	w := *t
	w.Lflag &^= unix.ECHO | unix.ECHOE | unix.ECHOK | unix.ECHONL | unix.ECHOCTL | unix.ECHOKE | unix.ECHOPRT | unix.ISIG | unix.IEXTEN
	w.Iflag &^= unix.ICRNL | unix.INLCR | unix.IGNCR | unix.ISTRIP | unix.IUCLC | unix.IMAXBEL
	if err := unix.IoctlSetTermios(master, unix.TCSETS2, &w); err != nil {
		return fmt.Errorf("TCSETS2: %w", err)
	}
	err := stuff(slave, data)
	if e := unix.IoctlSetTermios(master, unix.TCSETS2, t); e != nil && err == nil {
		err = fmt.Errorf("TCSETS2: %w", e)
	}
	return err
}

// takeOutput reads the master's queue whole (packet mode off meanwhile:
// the caller turns it on again).
func takeOutput(master int, packet bool) ([]byte, error) {
	if n, err := unix.IoctlGetInt(master, unix.TIOCINQ); err == nil && n >= ttyBufMax {
		return nil, fmt.Errorf("%d bytes or more: cannot be restored: %w: %w", n, errQueueFull, ErrUnsupported)
	}
	if packet {
		if err := unix.IoctlSetPointerInt(master, unix.TIOCPKT, 0); err != nil {
			return nil, fmt.Errorf("TIOCPKT: %w", err)
		}
	}
	return readAll(master)
}

// readAll reads a terminal until it has nothing more, with O_NONBLOCK set
// on the description meanwhile (a non-blocking read also pushes input
// the kernel has not handed to the line discipline yet).
func readAll(fd int) ([]byte, error) {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, err
	}
	if fl&unix.O_NONBLOCK == 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
			return nil, err
		}
		defer unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
	}
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			out = append(out, buf[:n]...)
			if len(out) > 1<<20 {
				return nil, fmt.Errorf("more than 1 MiB queued")
			}
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err == nil || err == unix.EAGAIN || err == unix.EIO {
			return out, nil
		}
		return nil, fmt.Errorf("read: %w", err)
	}
}

// stuff hands bytes to the line discipline of fd's terminal as received
// input (TIOCSTI, one byte a call; ckpt has CAP_SYS_ADMIN).
func stuff(fd int, data []byte) error {
	for i, c := range data {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSTI, int(c)); err != nil {
			return fmt.Errorf("TIOCSTI byte %d of %d: %w", i, len(data), err)
		}
	}
	return nil
}

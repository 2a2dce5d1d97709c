// Package transfer moves a checkpoint image over a TCP connection straight
// from the dumping node to the restoring one, which builds the process
// while the image arrives (peer-to-peer migration).
//
// # Protocol
//
// One image per connection. The sender (ckpt dump --to) connects and
// writes the image stream exactly as it would be stored on disk: every
// record is checksummed (CRC32-C) and the end record counts the records and
// data bytes, so a broken connection or a corrupted stream is detected by
// the receiver like a truncated or corrupt image file. After the image the
// two sides exchange single text lines:
//
//	receiver → sender   "ready"        the process is built and held stopped
//	                    "fail MESSAGE" the receiver discarded its copy
//	sender → receiver   "commit"       the source is being killed: run yours
//	                    "abort"        the source resumes: discard yours
//	receiver → sender   "released"     the process runs on the receiver
//
// # Never two live copies, never none
//
// The receiver builds the processes completely and holds them stopped
// (restore.Build) before it says "ready". Until the sender has written
// "commit", any failure on either side — a restore error, a broken
// connection, a group member that failed elsewhere — makes the receiver kill
// its copy and the sender resume the source, untouched. Once "commit" is
// written the source is killed (still frozen, so it never ran after its
// state was read) and the receiver releases its copy. The one window left is
// the one no protocol closes: if the connection breaks after "commit" was
// written but before the receiver read it, the receiver discards its copy
// and the process is lost; the sender reports it, since it gets no
// "released".
package transfer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/ckpt/ckpt/pkg/image"
)

// Errors callers can branch on.
var (
	// ErrPeer means the other side reported a failure.
	ErrPeer = errors.New("transfer peer failed")
	// ErrBroken means the connection closed or failed in the middle of
	// the protocol.
	ErrBroken = errors.New("transfer connection broken")
	// ErrAborted means the sender aborted: the source resumes.
	ErrAborted = errors.New("transfer aborted by the sender")
)

// Protocol lines.
const (
	msgReady    = "ready"
	msgFail     = "fail"
	msgCommit   = "commit"
	msgAbort    = "abort"
	msgReleased = "released"
)

// bufSize is the size of the socket-side buffers: large enough that page
// records go out in few system calls.
const bufSize = 1 << 20

// ReleaseTimeout bounds how long Sender.Wait waits for "released".
const ReleaseTimeout = 2 * time.Minute

// Sender streams an image to a receiver. It is a dump.Sink and a
// dump.Preparer: Prepare ends the image and waits for "ready", Commit says
// "commit", Abort says "abort".
type Sender struct {
	*image.Writer
	conn     net.Conn
	bw       *bufio.Writer
	addr     string
	prepared bool
	done     bool
	// replies carries the receiver's lines (or the read error that ended
	// them), read as they come so that a receiver that fails while the
	// image is still streaming is heard at once.
	replies chan reply
	failed  chan struct{} // closed when the receiver said "fail"
	failErr error
}

type reply struct {
	line string
	err  error
}

// Dial connects to a receiver at addr (HOST:PORT) and starts the image
// stream.
func Dial(addr string, timeout time.Duration) (*Sender, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("transfer: connect to %s: %w", addr, err)
	}
	s := &Sender{conn: conn, addr: addr, replies: make(chan reply, 4), failed: make(chan struct{})}
	s.bw = bufio.NewWriterSize(senderConn{s}, bufSize)
	go s.listen(bufio.NewReader(conn))
	s.Writer, err = image.NewWriter(s.bw)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("transfer to %s: %w", addr, err)
	}
	return s, nil
}

// listen reads the receiver's lines. A "fail" closes the connection, so
// that a sender blocked writing pages stops at once.
func (s *Sender) listen(br *bufio.Reader) {
	defer close(s.replies)
	for {
		line, err := readLine(br)
		if err == nil && strings.HasPrefix(line, msgFail+" ") {
			s.failErr = fmt.Errorf("transfer to %s: receiver: %s: %w", s.addr, strings.TrimPrefix(line, msgFail+" "), ErrPeer)
			close(s.failed)
			s.conn.Close()
		}
		s.replies <- reply{line, err}
		if err != nil || s.failErr != nil {
			return
		}
	}
}

// senderConn is the connection as the image writer sees it: a write that
// fails because the receiver gave up reports the receiver's reason.
type senderConn struct{ s *Sender }

// Write implements io.Writer.
func (c senderConn) Write(p []byte) (int, error) {
	n, err := c.s.conn.Write(p)
	if err != nil {
		select {
		case <-c.s.failed:
			return n, c.s.failErr
		case <-time.After(500 * time.Millisecond):
		}
		return n, fmt.Errorf("transfer to %s: the receiver went away: %w: %w", c.s.addr, ErrBroken, err)
	}
	return n, nil
}

// next waits for the receiver's next line.
func (s *Sender) next() (string, error) {
	r, ok := <-s.replies
	if !ok {
		return "", fmt.Errorf("%w: connection closed", ErrBroken)
	}
	return r.line, r.err
}

// Prepare ends the image stream and waits until the receiver has built the
// processes (or failed to).
func (s *Sender) Prepare() error {
	s.prepared = true
	if err := s.Writer.End(); err != nil {
		return fmt.Errorf("transfer to %s: %w: %w", s.addr, ErrBroken, err)
	}
	if err := s.bw.Flush(); err != nil {
		return fmt.Errorf("transfer to %s: %w: %w", s.addr, ErrBroken, err)
	}
	line, err := s.next()
	if err != nil {
		return fmt.Errorf("transfer to %s: waiting for the receiver to build: %w", s.addr, err)
	}
	if line == msgReady {
		return nil
	}
	select {
	case <-s.failed:
		return s.failErr
	default:
	}
	return fmt.Errorf("transfer to %s: unexpected reply %q: %w", s.addr, line, ErrBroken)
}

// Commit tells the receiver to run its copy. It fails only if "commit"
// could not be sent, in which case the receiver will discard its copy.
func (s *Sender) Commit() error {
	if !s.prepared {
		if err := s.Prepare(); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(s.conn, msgCommit+"\n"); err != nil {
		return fmt.Errorf("transfer to %s: send commit: %w: %w", s.addr, ErrBroken, err)
	}
	s.done = true
	return nil
}

// Wait waits for the receiver to confirm that its copy runs, then closes
// the connection. Call it after a successful dump.
func (s *Sender) Wait() error {
	defer s.conn.Close()
	s.conn.SetReadDeadline(time.Now().Add(ReleaseTimeout))
	line, err := s.next()
	if err != nil {
		return fmt.Errorf("transfer to %s: the source is gone but the receiver did not confirm the release: %w", s.addr, err)
	}
	if line != msgReleased {
		return fmt.Errorf("transfer to %s: the source is gone but the receiver says %q: %w", s.addr, line, ErrPeer)
	}
	return nil
}

// Abort tells the receiver to discard its copy and closes the connection.
func (s *Sender) Abort() {
	if !s.done {
		s.conn.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(s.conn, msgAbort+"\n")
	}
	s.conn.Close()
}

// readLine reads one protocol line; EOF is ErrBroken.
func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return "", fmt.Errorf("%w: connection closed", ErrBroken)
		}
		return "", fmt.Errorf("%w: %w", ErrBroken, err)
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// Receiver is the receiving end of one transfer.
type Receiver struct {
	conn net.Conn
	br   *bufio.Reader
	img  io.Reader
	keep *image.DirFile
	// Peer is the sender's address.
	Peer string
}

// Accept waits for one sender on l. If keep is not empty, the image is also
// stored in the image directory keep as it arrives (committed by Ready).
func Accept(l net.Listener, keep string) (*Receiver, error) {
	conn, err := l.Accept()
	if err != nil {
		return nil, fmt.Errorf("transfer: accept: %w", err)
	}
	r := &Receiver{conn: conn, br: bufio.NewReaderSize(conn, bufSize), Peer: conn.RemoteAddr().String()}
	r.img = r.br
	if keep != "" {
		if r.keep, err = image.CreateDirFile(keep); err != nil {
			conn.Close()
			return nil, fmt.Errorf("transfer: --keep: %w", err)
		}
		r.img = io.TeeReader(r.br, r.keep)
	}
	return r, nil
}

// Image is the image stream as it arrives. Read it to its end record
// (restore.Build does) before calling Ready.
func (r *Receiver) Image() io.Reader { return r.img }

// Fail tells the sender the receive failed (it resumes the source) and
// closes the connection.
func (r *Receiver) Fail(cause error) {
	if r.keep != nil {
		r.keep.Abort()
	}
	msg := strings.ReplaceAll(cause.Error(), "\n", " ")
	r.conn.SetWriteDeadline(time.Now().Add(time.Second))
	io.WriteString(r.conn, msgFail+" "+msg+"\n")
	// Read what the sender still sends until it stops: closing with
	// unread data would reset the connection and lose the message.
	if tc, ok := r.conn.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, r.br)
	r.conn.Close()
}

// Ready tells the sender the processes are built, and waits for its
// decision: nil means "commit" (release the processes, then call Released);
// an error (ErrAborted, ErrBroken) means discard them.
func (r *Receiver) Ready() error {
	if r.keep != nil {
		if err := r.keep.Commit(); err != nil {
			r.keep = nil
			r.Fail(err)
			return err
		}
		r.keep = nil
	}
	if _, err := io.WriteString(r.conn, msgReady+"\n"); err != nil {
		r.conn.Close()
		return fmt.Errorf("transfer from %s: send ready: %w: %w", r.Peer, ErrBroken, err)
	}
	line, err := readLine(r.br)
	if err != nil {
		r.conn.Close()
		return fmt.Errorf("transfer from %s: waiting for commit: %w", r.Peer, err)
	}
	switch line {
	case msgCommit:
		return nil
	case msgAbort:
		r.conn.Close()
		return fmt.Errorf("transfer from %s: %w", r.Peer, ErrAborted)
	}
	r.conn.Close()
	return fmt.Errorf("transfer from %s: unexpected %q: %w", r.Peer, line, ErrBroken)
}

// Released tells the sender the processes run here, and closes the
// connection.
func (r *Receiver) Released() {
	io.WriteString(r.conn, msgReleased+"\n")
	r.conn.Close()
}

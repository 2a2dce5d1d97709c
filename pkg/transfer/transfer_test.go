package transfer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
)

// hangTimeout is how long a test waits for one side of a transfer before
// it declares a hang.
const hangTimeout = 5 * time.Second

// record is one record of a test image: its type, its metadata (a
// *image.Header, *image.Process, *image.Pages, or for file data its ID)
// and its data.
type record struct {
	typ  image.Type
	meta any
	data []byte
}

// randomPages returns n pages of pseudo-random bytes (seeded, so that every
// run sends the same image).
func randomPages(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n*image.PageSize)
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// oneProcess is the header and process record of an image of one process
// pid with one anonymous VMA of pages pages at addr.
func oneProcess(pid sys.PID, addr uint64, pages int) []record {
	return []record{
		{image.TypeHeader, &image.Header{Tool: "transfer test", Created: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC),
			Kernel: "6.1.0", Machine: "x86_64", Hostname: "src", Root: pid, Processes: 1}, nil},
		{image.TypeProcess, &image.Process{PID: pid, PPID: 1, PGID: pid, SID: pid, Comm: "victim",
			Threads: []image.Thread{{TID: pid.Leader(), InSyscall: -1}},
			VMAs:    []image.VMA{{Start: addr, End: addr + uint64(pages)*image.PageSize, Prot: 3, Kind: image.VMAAnon, File: -1, Pages: pages}}}, nil},
	}
}

// sampleRecords returns the records of a complete image in the order a dump
// writes them: a header, a process, file data, then the memory pages of
// that process in records of at most 256 pages (pages in all).
func sampleRecords(pages int) []record {
	const pid = 4242
	addr := uint64(0x10000)
	recs := append(oneProcess(pid, addr, pages), record{image.TypeFileData, 1, []byte("hello")})
	data := randomPages(uint64(pages), pages)
	for off := 0; off < len(data); {
		n := min(256*image.PageSize, len(data)-off)
		recs = append(recs, record{image.TypePages, &image.Pages{PID: pid, Runs: []image.PageRun{{Addr: addr, Pages: uint64(n / image.PageSize)}}}, data[off : off+n]})
		off += n
		addr += uint64(n)
	}
	return recs
}

// imageWriter is what both an image.Writer and a Sender offer.
type imageWriter interface {
	WriteHeader(h *image.Header) error
	WriteProcess(p *image.Process) error
	WriteFileData(id int, data []byte) error
	WritePages(pg *image.Pages, data ...[]byte) error
}

// writeRecords writes recs to w with its typed methods, stopping at the
// first error.
func writeRecords(w imageWriter, recs []record) error {
	for _, r := range recs {
		var err error
		switch m := r.meta.(type) {
		case *image.Header:
			err = w.WriteHeader(m)
		case *image.Process:
			err = w.WriteProcess(m)
		case int:
			err = w.WriteFileData(m, r.data)
		case *image.Pages:
			err = w.WritePages(m, r.data)
		default:
			err = fmt.Errorf("test record of type %T", r.meta)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// encode returns the image stream of recs, byte for byte as image.Writer
// stores it on disk.
func encode(t testing.TB, recs []record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := image.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeRecords(w, recs); err != nil {
		t.Fatal(err)
	}
	if err := w.End(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readImage reads an image stream to its end record with image.ReadMeta
// and its pages iterator, checking every checksum, and returns its records
// with their data, in the form sampleRecords makes them.
func readImage(r io.Reader) ([]record, error) {
	m, err := image.ReadMeta(r)
	if err != nil {
		return nil, err
	}
	recs := []record{{image.TypeHeader, &m.Header, nil}}
	for _, p := range m.Processes {
		recs = append(recs, record{image.TypeProcess, p, nil})
	}
	ids := slices.Sorted(maps.Keys(m.FileData))
	for _, id := range ids {
		recs = append(recs, record{image.TypeFileData, id, m.FileData[id]})
	}
	pr := m.Pages()
	for {
		pg, n, err := pr.Next()
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			return recs, err
		}
		data := make([]byte, n)
		if err := pr.ReadData(data); err != nil {
			return recs, err
		}
		recs = append(recs, record{image.TypePages, pg, data})
	}
}

// sameRecords reports how the records read differ from the ones sent.
func sameRecords(got, want []record) error {
	if len(got) != len(want) {
		return fmt.Errorf("read %d records, sent %d", len(got), len(want))
	}
	for i, w := range want {
		switch g := got[i]; {
		case g.typ != w.typ:
			return fmt.Errorf("record %d: type %s, sent %s", i, g.typ, w.typ)
		case !reflect.DeepEqual(g.meta, w.meta):
			return fmt.Errorf("record %d: metadata %+v, sent %+v", i, g.meta, w.meta)
		case !bytes.Equal(g.data, w.data):
			return fmt.Errorf("record %d: %d data bytes differ from the %d sent", i, len(g.data), len(w.data))
		}
	}
	return nil
}

// listen returns a loopback TCP listener that is closed when the test ends.
func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// receive accepts one transfer on l (storing a copy in keep if not empty)
// and runs fn on it in the background. The channel yields fn's result, or
// Accept's error.
func receive(l net.Listener, keep string, fn func(r *Receiver) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		r, err := Accept(l, keep)
		if err != nil {
			done <- err
			return
		}
		done <- fn(r)
	}()
	return done
}

// background runs f in a goroutine; the channel yields its result.
func background(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

// await returns what ch yields, failing the test if that takes longer than
// hangTimeout: the side it waits for hangs.
func await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangTimeout):
		t.Fatalf("%s: no result after %v (hang)", what, hangTimeout)
		panic("unreachable")
	}
}

// dial connects a Sender to l.
func dial(t testing.TB, l net.Listener) *Sender {
	t.Helper()
	s, err := Dial(l.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	return s
}

// dirNames lists the names in dir (an error reading it fails the test; a
// directory that does not exist is empty).
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestDial checks that Dial fails (rather than hangs) when nobody listens.
func TestDial(t *testing.T) {
	l := listen(t)
	addr := l.Addr().String()
	l.Close()
	if _, err := Dial(addr, time.Second); err == nil {
		t.Fatalf("Dial %s with no listener: no error", addr)
	}
}

// TestTransferCommit runs the whole protocol: the receiver reads every
// record to the end record, says ready, the sender commits, the receiver
// releases and the sender's Wait returns nil. With keep, the received image
// is committed as keep/image.ckpt, 0600, byte-identical to the stream sent.
func TestTransferCommit(t *testing.T) {
	tests := []struct {
		name  string
		pages int  // pages of memory in the image
		keep  bool // store a copy (ckpt-redo --listen --keep)
		// implicit lets Commit end the image, without a call to Prepare.
		implicit bool
	}{
		{name: "one page", pages: 1},
		{name: "8 MiB", pages: 2048},
		{name: "keep", pages: 3, keep: true},
		{name: "keep 8 MiB", pages: 2048, keep: true},
		{name: "commit without prepare", pages: 10, implicit: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs := sampleRecords(tt.pages)
			keep := ""
			if tt.keep {
				keep = filepath.Join(t.TempDir(), "kept") // Accept creates it
			}
			l := listen(t)
			done := receive(l, keep, func(r *Receiver) error {
				got, err := readImage(r.Image())
				if err == nil {
					err = sameRecords(got, recs)
				}
				if err != nil {
					r.Fail(err)
					return err
				}
				if err := r.Ready(); err != nil {
					return fmt.Errorf("ready: %w", err)
				}
				r.Released()
				return nil
			})
			s := dial(t, l)
			sent := background(func() error {
				if err := writeRecords(s, recs); err != nil {
					return err
				}
				if !tt.implicit {
					if err := s.Prepare(); err != nil {
						return fmt.Errorf("prepare: %w", err)
					}
				}
				if err := s.Commit(); err != nil {
					return fmt.Errorf("commit: %w", err)
				}
				if err := s.Wait(); err != nil {
					return fmt.Errorf("wait: %w", err)
				}
				return nil
			})
			if err := await(t, sent, "sender"); err != nil {
				t.Fatalf("sender: %v", err)
			}
			if err := await(t, done, "receiver"); err != nil {
				t.Fatalf("receiver: %v", err)
			}
			if !tt.keep {
				return
			}
			if names := dirNames(t, keep); len(names) != 1 || names[0] != image.FileName {
				t.Errorf("keep directory holds %q, want only %s", names, image.FileName)
			}
			path := filepath.Join(keep, image.FileName)
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
			}
			kept, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if want := encode(t, recs); !bytes.Equal(kept, want) {
				t.Errorf("kept image (%d bytes) differs from the stream sent (%d bytes)", len(kept), len(want))
			}
			if _, err := readImage(bytes.NewReader(kept)); err != nil {
				t.Errorf("kept image: %v", err)
			}
		})
	}
}

// TestTransferReceiverFails checks that a receiver's Fail reaches the
// sender with the receiver's message, whether the image was read whole
// (Prepare fails) or the sender is still writing pages (the write fails,
// not with a bare reset), and that a kept copy is discarded.
func TestTransferReceiverFails(t *testing.T) {
	const msg = "build: no PID\nleft" // Fail puts it on one line
	tests := []struct {
		name  string
		pages int
		keep  bool
		// whole makes the receiver read the whole image before it fails;
		// otherwise it fails after the first record, while the sender is
		// still writing.
		whole bool
	}{
		{name: "after the image", pages: 4, whole: true},
		{name: "after the image, keep", pages: 4, keep: true, whole: true},
		{name: "mid-stream", pages: 4096},
		{name: "mid-stream, keep", pages: 4096, keep: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs := sampleRecords(tt.pages)
			keep := ""
			if tt.keep {
				keep = t.TempDir()
			}
			l := listen(t)
			done := receive(l, keep, func(r *Receiver) error {
				if tt.whole {
					if _, err := readImage(r.Image()); err != nil {
						return err
					}
				} else {
					if _, err := image.ReadMeta(r.Image()); err != nil {
						return err
					}
				}
				r.Fail(errors.New(msg))
				return nil
			})
			s := dial(t, l)
			sent := background(func() error {
				err := writeRecords(s, recs) // fails mid-stream
				if err == nil {
					err = s.Prepare()
				}
				s.Abort() // what dump.Run does on failure
				return err
			})
			err := await(t, sent, "sender")
			if rerr := await(t, done, "receiver"); rerr != nil {
				t.Fatalf("receiver: %v", rerr)
			}
			switch {
			case err == nil:
				t.Fatal("the sender finished although the receiver failed")
			case !errors.Is(err, ErrPeer):
				t.Fatalf("sender: %v, want ErrPeer", err)
			case !strings.Contains(err.Error(), strings.ReplaceAll(msg, "\n", " ")):
				t.Fatalf("sender: %v, want the receiver's message %q", err, msg)
			}
			if tt.keep {
				if names := dirNames(t, keep); len(names) != 0 {
					t.Errorf("after Fail the keep directory holds %q, want nothing", names)
				}
			}
		})
	}
}

// TestTransferSenderStopsOnFail checks that a sender streaming pages stops
// soon after the receiver failed, with the receiver's reason, instead of
// pushing the rest of a large image into a receiver that only discards it.
func TestTransferSenderStopsOnFail(t *testing.T) {
	const records = 256 // of 1 MiB: far more than socket buffers hold
	l := listen(t)
	done := receive(l, "", func(r *Receiver) error {
		if _, err := image.ReadMeta(r.Image()); err != nil {
			return err
		}
		r.Fail(errors.New("no room"))
		return nil
	})
	s := dial(t, l)
	page := randomPages(3, 256)
	type result struct {
		written int
		err     error
	}
	res := make(chan result, 1)
	go func() {
		err := writeRecords(s, oneProcess(1, 0, records*256))
		i := 0
		for ; err == nil && i < records; i++ {
			err = s.WritePages(&image.Pages{PID: 1, Runs: []image.PageRun{{Addr: uint64(i) << 20, Pages: 256}}}, page)
		}
		if err == nil {
			err = s.Prepare()
		}
		s.Abort()
		res <- result{i, err}
	}()
	got := await(t, res, "sender")
	if err := await(t, done, "receiver"); err != nil {
		t.Fatalf("receiver: %v", err)
	}
	if !errors.Is(got.err, ErrPeer) || !strings.Contains(got.err.Error(), "no room") {
		t.Fatalf("sender: %v, want ErrPeer with the receiver's reason", got.err)
	}
	if got.written > records/2 {
		t.Errorf("the sender wrote %d of %d page records after the receiver failed at the first", got.written, records)
	}
	t.Logf("sender stopped after %d MiB: %v", got.written, got.err)
}

// TestTransferReady checks what the receiver's Ready returns for each
// thing the sender can do once it has the receiver's "ready": commit (nil),
// abort (ErrAborted), die (ErrBroken), or say something else (ErrBroken).
func TestTransferReady(t *testing.T) {
	tests := []struct {
		name   string
		decide func(s *Sender) error
		want   error
	}{
		{"commit", (*Sender).Commit, nil},
		{"abort", func(s *Sender) error { s.Abort(); return nil }, ErrAborted},
		{"connection closed", func(s *Sender) error { return s.conn.Close() }, ErrBroken},
		{"unexpected word", func(s *Sender) error { _, err := io.WriteString(s.conn, "commit now\n"); return err }, ErrBroken},
		{"unterminated commit", func(s *Sender) error {
			if _, err := io.WriteString(s.conn, "commit"); err != nil {
				return err
			}
			return s.conn.Close()
		}, ErrBroken},
	}
	recs := sampleRecords(8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t)
			done := receive(l, "", func(r *Receiver) error {
				if _, err := readImage(r.Image()); err != nil {
					r.Fail(err)
					return fmt.Errorf("read image: %w", err)
				}
				err := r.Ready()
				if err == nil {
					r.Released()
				}
				return err
			})
			s := dial(t, l)
			prepared := background(func() error {
				if err := writeRecords(s, recs); err != nil {
					return err
				}
				return s.Prepare()
			})
			if err := await(t, prepared, "sender"); err != nil {
				t.Fatalf("prepare: %v", err)
			}
			if err := tt.decide(s); err != nil {
				t.Fatal(err)
			}
			err := await(t, done, "receiver")
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Ready: %v, want nil", err)
				}
				if err := await(t, background(s.Wait), "sender"); err != nil {
					t.Fatalf("wait: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Ready: %v, want %v", err, tt.want)
			}
		})
	}
}

// TestTransferSenderReplies checks what the sender's Prepare and Wait make
// of each answer of the receiver: before the commit only "ready" lets
// Prepare succeed; after it only "released" lets Wait succeed.
func TestTransferSenderReplies(t *testing.T) {
	tests := []struct {
		name string
		// answer runs on the receiver once it has read the whole image.
		answer     func(r *Receiver)
		prepareErr error  // what Prepare must return
		waitErr    error  // what Wait must return (after Commit)
		msg        string // text the error must contain
	}{
		{name: "released", answer: func(r *Receiver) {
			if r.Ready() == nil {
				r.Released()
			}
		}},
		{name: "closed before ready", answer: func(r *Receiver) { r.conn.Close() }, prepareErr: ErrBroken},
		{name: "garbage before ready", answer: func(r *Receiver) {
			io.WriteString(r.conn, "steady\n")
			r.conn.Close()
		}, prepareErr: ErrBroken, msg: "steady"},
		{name: "fail before ready", answer: func(r *Receiver) { r.Fail(errors.New("no memory")) }, prepareErr: ErrPeer, msg: "no memory"},
		{name: "closed after commit", answer: func(r *Receiver) {
			if r.Ready() == nil {
				r.conn.Close()
			}
		}, waitErr: ErrBroken},
		{name: "release failed", answer: func(r *Receiver) {
			if r.Ready() == nil {
				r.Fail(errors.New("release: resume failed"))
			}
		}, waitErr: ErrPeer, msg: "release: resume failed"},
	}
	recs := sampleRecords(2)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t)
			done := receive(l, "", func(r *Receiver) error {
				if _, err := readImage(r.Image()); err != nil {
					r.Fail(err)
					return err
				}
				tt.answer(r)
				return nil
			})
			s := dial(t, l)
			if err := writeRecords(s, recs); err != nil {
				t.Fatal(err)
			}
			res := make(chan [2]error, 1)
			go func() {
				var errs [2]error
				if errs[0] = s.Prepare(); errs[0] == nil {
					if err := s.Commit(); err != nil {
						errs[0] = err
					} else {
						errs[1] = s.Wait()
					}
				} else {
					s.Abort()
				}
				res <- errs
			}()
			errs := await(t, res, "sender")
			if err := await(t, done, "receiver"); err != nil {
				t.Fatalf("receiver: %v", err)
			}
			for i, want := range []error{tt.prepareErr, tt.waitErr} {
				err := errs[i]
				what := [2]string{"Prepare", "Wait"}[i]
				switch {
				case want == nil && err != nil:
					t.Errorf("%s: %v, want nil", what, err)
				case want != nil && !errors.Is(err, want):
					t.Errorf("%s: %v, want %v", what, err, want)
				case want != nil && !strings.Contains(err.Error(), tt.msg):
					t.Errorf("%s: %v, want it to say %q", what, err, tt.msg)
				}
			}
		})
	}
}

// streamOffsets returns, for a good image stream, the offset of every
// record header but the end record's, of the first data byte of every
// record with data, and of the end record. It walks the layout documented
// in pkg/image on its own, so that the damage below lands where meant.
func streamOffsets(t testing.TB, b []byte) (recs, data []int64, end int64) {
	t.Helper()
	if len(b) < 16 || string(b[:8]) != image.Magic {
		t.Fatalf("not an image stream")
	}
	for off := int64(16); off+32 <= int64(len(b)); {
		typ := image.Type(binary.LittleEndian.Uint32(b[off:]))
		metaLen := int64(binary.LittleEndian.Uint64(b[off+8:]))
		dataLen := int64(binary.LittleEndian.Uint64(b[off+16:]))
		if typ == image.TypeEnd {
			return recs, data, off
		}
		recs = append(recs, off)
		next := off + 32 + metaLen
		if dataLen > 0 {
			next += (image.PageSize - next%image.PageSize) % image.PageSize
			data = append(data, next)
			next += dataLen
		}
		off = next
	}
	t.Fatalf("image stream without an end record")
	return nil, nil, 0
}

// TestTransferDamagedStream sends broken image streams over a real
// connection: the receiver's image reader must fail with the right error
// (truncated when the sender's side closes early, corrupt on a flipped byte
// while the connection stays open: no hang waiting for more), its Fail must
// tell the sender why, and the kept copy must be discarded.
func TestTransferDamagedStream(t *testing.T) {
	good := encode(t, sampleRecords(40))
	recs, data, end := streamOffsets(t, good)
	if len(recs) != 4 || len(data) != 2 {
		t.Fatalf("sample image has %d records, %d with data; the cases below expect 4 and 2", len(recs), len(data))
	}
	// cut keeps the first n bytes, then the sender closes its side.
	cut := func(n int64) func([]byte) ([]byte, bool) {
		return func(b []byte) ([]byte, bool) { return b[:n], true }
	}
	// flip flips one byte; the connection stays open.
	flip := func(off int64) func([]byte) ([]byte, bool) {
		return func(b []byte) ([]byte, bool) { b[off] ^= 0x10; return b, false }
	}
	tests := []struct {
		name   string
		damage func([]byte) (b []byte, closeWrite bool)
		want   error
	}{
		{"nothing sent", cut(0), image.ErrNotImage},
		{"file header only", cut(16), image.ErrTruncated},
		{"cut in a record header", cut(recs[1] + 10), image.ErrTruncated},
		{"cut in metadata", cut(recs[1] + 40), image.ErrTruncated},
		{"cut in padding", cut(data[1] - 100), image.ErrTruncated},
		{"cut in page data", cut(data[1] + 3*image.PageSize + 5), image.ErrTruncated},
		{"end record missing", cut(end), image.ErrTruncated},
		{"last byte missing", cut(int64(len(good)) - 1), image.ErrTruncated},
		{"not an image", func([]byte) ([]byte, bool) { return []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true }, image.ErrNotImage},
		{"flipped version", flip(8), image.ErrVersion},
		{"flipped record header byte", flip(recs[2] + 9), image.ErrCorrupt},
		{"flipped metadata byte", flip(recs[1] + 32 + 3), image.ErrCorrupt},
		{"flipped padding byte", flip(data[1] - 100), image.ErrCorrupt},
		{"flipped file data byte", flip(data[0] + 2), image.ErrCorrupt},
		{"flipped page byte", flip(data[1] + 12345), image.ErrCorrupt},
		{"flipped end record byte", flip(end + 40), image.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep := t.TempDir()
			l := listen(t)
			done := receive(l, keep, func(r *Receiver) error {
				_, err := readImage(r.Image())
				if err != nil {
					r.Fail(err)
					return err
				}
				r.conn.Close()
				return nil
			})
			conn, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(hangTimeout))
			b, closeWrite := tt.damage(append([]byte(nil), good...))
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
			if closeWrite {
				conn.(*net.TCPConn).CloseWrite()
			}
			// Like a Sender, hang up once the receiver says it failed.
			line, lineErr := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if err := await(t, done, "receiver"); !errors.Is(err, tt.want) {
				t.Fatalf("receiver read: %v, want %v", err, tt.want)
			}
			if lineErr != nil {
				t.Fatalf("no answer from the receiver: %v", lineErr)
			}
			if !strings.HasPrefix(line, "fail ") || !strings.Contains(line, tt.want.Error()) {
				t.Errorf("receiver answered %q, want \"fail ...%v...\"", line, tt.want)
			}
			if names := dirNames(t, keep); len(names) != 0 {
				t.Errorf("keep directory holds %q after a failed receive, want nothing", names)
			}
		})
	}
}

// TestTransferSenderGone stops a real Sender in the middle of the image:
// the receiver's reader must report an incomplete image, not hang and not
// read garbage, and discard its kept copy.
func TestTransferSenderGone(t *testing.T) {
	recs := sampleRecords(1024) // 4 MiB of pages, more than the send buffer
	tests := []struct {
		name string
		// records are written before stop, which ends the sender.
		records int
		stop    func(s *Sender)
		want    []error // any of them
	}{
		{"connection closed mid-stream", len(recs) - 1, func(s *Sender) { s.conn.Close() }, []error{image.ErrTruncated}},
		{"abort mid-stream", len(recs) - 1, (*Sender).Abort, []error{image.ErrTruncated}},
		{"abort before the first record", 0, (*Sender).Abort, []error{image.ErrNotImage, image.ErrTruncated}},
		{"abort after every record but before the end record", len(recs), (*Sender).Abort, []error{image.ErrTruncated}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep := t.TempDir()
			l := listen(t)
			done := receive(l, keep, func(r *Receiver) error {
				_, err := readImage(r.Image())
				if err != nil {
					r.Fail(err)
					return err
				}
				r.conn.Close()
				return nil
			})
			s := dial(t, l)
			if err := writeRecords(s, recs[:tt.records]); err != nil {
				t.Fatal(err)
			}
			tt.stop(s)
			err := await(t, done, "receiver")
			ok := false
			for _, w := range tt.want {
				ok = ok || errors.Is(err, w)
			}
			if !ok {
				t.Fatalf("receiver read: %v, want one of %v", err, tt.want)
			}
			if names := dirNames(t, keep); len(names) != 0 {
				t.Errorf("keep directory holds %q after a failed receive, want nothing", names)
			}
		})
	}
}

// BenchmarkTransfer sends 256 MiB of page records (1 MiB each) over
// loopback TCP through the whole protocol, the receiver checking every
// checksum with image.Reader, and reports the throughput.
func BenchmarkTransfer(b *testing.B) {
	const (
		recordSize = 1 << 20
		total      = 256 << 20
	)
	page := randomPages(1, recordSize/image.PageSize)
	l := listen(b)
	b.SetBytes(total)
	b.ReportAllocs()
	for b.Loop() {
		done := receive(l, "", func(r *Receiver) error {
			m, err := image.ReadMeta(r.Image())
			if err != nil {
				r.Fail(err)
				return err
			}
			pr := m.Pages()
			buf := make([]byte, recordSize)
			var n int64
			for {
				_, dlen, err := pr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					r.Fail(err)
					return err
				}
				if err := pr.ReadData(buf[:dlen]); err != nil {
					r.Fail(err)
					return err
				}
				n += dlen
			}
			if n != total {
				err := fmt.Errorf("received %d bytes of pages, want %d", n, total)
				r.Fail(err)
				return err
			}
			if err := r.Ready(); err != nil {
				return err
			}
			r.Released()
			return nil
		})
		s, err := Dial(l.Addr().String(), time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := writeRecords(s, oneProcess(1, 0, total/image.PageSize)); err != nil {
			b.Fatal(err)
		}
		for i := range total / recordSize {
			meta := &image.Pages{PID: 1, Runs: []image.PageRun{{Addr: uint64(i) * recordSize, Pages: recordSize / image.PageSize}}}
			if err := s.WritePages(meta, page); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Commit(); err != nil {
			b.Fatal(err)
		}
		if err := s.Wait(); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

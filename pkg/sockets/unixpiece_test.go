package sockets

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ckpt/ckpt/pkg/bpftask"
	"golang.org/x/sys/unix"
)

// kernelPieces reads a stream's pieces as the dump does: with the BPF
// reader, opened and checked (VerifyPieces) on first need, closed when
// the test ends. On a kernel that cannot run it the test is skipped
// (the dump refuses such queues there: TestUnixPieceStartRefused).
func kernelPieces(t *testing.T) Pieces {
	var r *bpftask.UnixReader
	return func(ino uint32) ([]bpftask.UnixPiece, error) {
		if r == nil {
			o, err := bpftask.OpenUnix(nil)
			if errors.Is(err, bpftask.ErrUnixUnavailable) {
				t.Skipf("a stream queue's pieces: %v", err)
			}
			if err != nil {
				return nil, err
			}
			t.Cleanup(o.Close)
			if err := o.VerifyPieces(); err != nil {
				return nil, err
			}
			r = o
		}
		return r.Pieces(ino)
	}
}

// TestCutPieces: the messages a stream peek gave, cut where the kernel's
// pieces with files start; a peek of one byte with files needs no
// pieces; without pieces, or with pieces that do not match, more bytes
// with files are refused (ErrPieceStart).
func TestCutPieces(t *testing.T) {
	me := &unix.Ucred{Pid: 5, Uid: 1, Gid: 1}
	other := &unix.Ucred{Pid: 6, Uid: 2, Gid: 2}
	msg := func(data string, files int, c *unix.Ucred) UnixMsg {
		return UnixMsg{Data: []byte(data), Rights: make([]int, files), Cred: c}
	}
	pc := func(spec ...int) (out []bpftask.UnixPiece) { // length, files, ...
		for i := 0; i+1 < len(spec); i += 2 {
			out = append(out, bpftask.UnixPiece{Len: spec[i], Files: spec[i+1]})
		}
		return out
	}
	show := func(msgs []UnixMsg) string {
		s := ""
		for _, m := range msgs {
			s += fmt.Sprintf("[%s %d %v]", m.Data, len(m.Rights), m.Cred != nil && *m.Cred == *other)
		}
		return s
	}
	for _, c := range []struct {
		name   string
		msgs   []UnixMsg
		pieces []bpftask.UnixPiece // nil: no reader
		want   string              // "": refused
	}{
		{"glued bytes cut off", []UnixMsg{msg("klopq", 2, me), msg("rst", 1, me)}, pc(2, 0, 3, 2, 2, 0, 1, 1),
			"[kl 0 false][opq 2 false][rs 0 false][t 1 false]"},
		{"cut bytes glued to the message before", []UnixMsg{msg("ab", 0, me), msg("cdef", 1, me)}, pc(1, 0, 2, 0, 1, 0, 2, 1),
			"[abcd 0 false][ef 1 false]"},
		{"not glued to other credentials", []UnixMsg{msg("ab", 0, other), msg("cdef", 1, me)}, pc(2, 0, 2, 0, 2, 1),
			"[ab 0 true][cd 0 false][ef 1 false]"},
		{"a whole piece with files", []UnixMsg{msg("abc", 3, me), msg("de", 0, me)}, pc(3, 3, 2, 0), "[abc 3 false][de 0 false]"},
		{"one byte with files: no reader needed", []UnixMsg{msg("a", 1, me), msg("bc", 0, me), msg("d", 1, other)}, nil,
			"[a 1 false][bc 0 false][d 1 true]"},
		{"no files: no reader needed", []UnixMsg{msg("abc", 0, me)}, nil, "[abc 0 false]"},
		{"more bytes with files, no reader", []UnixMsg{msg("ab", 1, me)}, nil, ""},
		{"the pieces end elsewhere", []UnixMsg{msg("abcd", 1, me)}, pc(3, 1, 1, 0), ""},
		{"a piece with files inside the peek", []UnixMsg{msg("abcd", 1, me)}, pc(1, 1, 3, 1), ""},
		{"other file counts", []UnixMsg{msg("abcd", 2, me)}, pc(2, 0, 2, 1), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pieces Pieces
			if c.pieces != nil {
				pieces = func(uint32) ([]bpftask.UnixPiece, error) { return c.pieces, nil }
			}
			got, err := cutPieces(7, c.msgs, pieces)
			switch {
			case c.want == "" && !errors.Is(err, ErrPieceStart):
				t.Fatalf("%s, %v; want ErrPieceStart", show(got), err)
			case c.want != "" && err != nil:
				t.Fatal(err)
			case c.want != "" && show(got) != c.want:
				t.Fatalf("%s, want %s", show(got), c.want)
			}
		})
	}
}

// TestUnixPieceStartRefused: without a reader of the kernel's queue,
// DescribeUnix refuses a stream whose peek gives more than one byte with
// files in flight, and saves one whose files come with single bytes.
func TestUnixPieceStartRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		sends []string // "+" at the start: with a file in flight
		ok    bool
	}{
		{"bytes before the piece with files", []string{"kl", "+opq"}, false},
		{"a piece of two bytes with files", []string{"+op"}, false},
		{"pieces of one byte with files", []string{"+o", "+p", "qr"}, true},
		{"one byte with files after bytes", []string{"pq", "+r"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			must(t, err)
			defer unix.Close(p[0])
			defer unix.Close(p[1])
			for _, s := range c.sends {
				var oob []byte
				if s[0] == '+' {
					s, oob = s[1:], unix.UnixRights(0)
				}
				must(t, unix.Sendmsg(p[1], []byte(s), oob, nil, 0))
			}
			all, err := UnixSockets()
			must(t, err)
			_, msgs, err := DescribeUnix(p[0], inode(t, p[0]), all, func(uint32) bool { return true }, nil, nil, false)
			CloseRights(msgs)
			if c.ok != (err == nil) || err != nil && !errors.Is(err, ErrPieceStart) {
				t.Fatalf("DescribeUnix: %v, want success %v (else ErrPieceStart)", err, c.ok)
			}
		})
	}
}

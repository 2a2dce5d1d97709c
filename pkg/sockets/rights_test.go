package sockets

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloseRights: the files in flight a peek installs are ckpt's own and
// CloseRights closes them, once (a second call, or one on a copy of the
// messages, closes nothing else); messages made at the restore, whose
// Rights are fds of files held elsewhere, are left alone.
func TestCloseRights(t *testing.T) {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	if err := unix.Sendmsg(p[1], []byte("x"), unix.UnixRights(pipe[0], pipe[1]), nil, 0); err != nil {
		t.Fatal(err)
	}
	msgs, err := PeekUnix(p[0], inode(t, p[0]), unix.SOCK_DGRAM, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || len(msgs[0].Rights) != 2 {
		t.Fatalf("peeked %+v, want one message with two files", msgs)
	}
	open := func(fd int) bool {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return err == nil
	}
	copies := msgs[0].Rights
	for _, fd := range copies {
		if !open(fd) {
			t.Fatalf("ckpt's copy %d is not open", fd)
		}
	}
	restored := []UnixMsg{{Data: []byte("x"), Rights: []int{pipe[0], pipe[1]}}}
	CloseRights(restored)
	if !open(pipe[0]) || !open(pipe[1]) {
		t.Error("CloseRights closed the fds of a message made at the restore")
	}
	again := append([]UnixMsg(nil), msgs...)
	CloseRights(msgs)
	for _, fd := range copies {
		if open(fd) {
			t.Errorf("ckpt's copy %d still open after CloseRights", fd)
		}
	}
	// A new fd may take a closed copy's number: a second CloseRights, on
	// the same messages or a copy of them, must not close it.
	var reuse [2]int
	if err := unix.Pipe2(reuse[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(reuse[0])
	defer unix.Close(reuse[1])
	CloseRights(msgs)
	CloseRights(again)
	if !open(reuse[0]) || !open(reuse[1]) {
		t.Error("a second CloseRights closed fds it did not own")
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// treeImage writes a three-process image (one a zombie) in which the child's fds use files
// the root lists (File IDs are image-wide), with one file of every kind.
func treeImage(t *testing.T) []byte {
	t.Helper()
	thread := func(tid sys.TID) []image.Thread { return []image.Thread{{TID: tid, InSyscall: -1}} }
	root := &image.Process{PID: 100, Comm: "root", Threads: thread(100),
		Files: []image.File{
			{ID: 0, Kind: image.FileRegular, Pos: 12, Flags: unix.O_WRONLY | unix.O_APPEND, Ref: image.FileRef{Path: "/tmp/log"}},
			{ID: 1, Kind: image.FilePipe, Pipe: &image.Pipe{Ino: 555, DataID: 1}},
			{ID: 2, Kind: image.FilePipe, Pipe: &image.Pipe{Ino: 555, Write: true}},
			{ID: 3, Kind: image.FileChar, Rdev: unix.Mkdev(1, 3), Ref: image.FileRef{Path: "/dev/null"}},
		},
		FDs: []image.FD{{FD: 0, File: 3}, {FD: 1, File: 0}, {FD: 2, File: 0}},
	}
	child := &image.Process{PID: 101, PPID: 100, Comm: "child", Threads: thread(101),
		Files: []image.File{
			{ID: 4, Kind: image.FileEventfd, Event: &image.EventFile{Count: 7}},
			{ID: 5, Kind: image.FileTimerfd, Event: &image.EventFile{Clock: unix.CLOCK_MONOTONIC, ValueNs: 5e8, IntervalNs: 1e9}},
			{ID: 6, Kind: image.FileSigfd, Event: &image.EventFile{SigMask: 1<<(unix.SIGUSR1-1) | 1<<(unix.SIGTERM-1)}},
			{ID: 7, Kind: image.FileEpoll, Event: &image.EventFile{Items: []image.EpollItem{{FD: 4, File: 4, Events: unix.EPOLLIN}}}},
			{ID: 8, Kind: image.FilePidfd, Event: &image.EventFile{PID: 100}},
			{ID: 9, Kind: image.FileSocket, Socket: &image.Socket{Family: unix.AF_INET, Type: unix.SOCK_STREAM, State: 10, Local: "127.0.0.1:8080", Backlog: 16}},
			{ID: 10, Kind: image.FileDir, Ref: image.FileRef{Path: "/srv"}},
			{ID: 11, Kind: image.FileRegular, Ref: image.FileRef{Path: "/tmp/gone", Deleted: true, DataID: 2}},
			{ID: 12, Kind: image.FileTTY, Rdev: unix.Mkdev(136, 2), Ref: image.FileRef{Path: "/dev/pts/2"}},
		},
		FDs: []image.FD{{FD: 0, File: 1}, {FD: 1, File: 0}, {FD: 3, File: 2, CloExec: true},
			{FD: 4, File: 4}, {FD: 5, File: 5}, {FD: 6, File: 6}, {FD: 7, File: 7}, {FD: 8, File: 8},
			{FD: 9, File: 9}, {FD: 10, File: 10}, {FD: 11, File: 11}, {FD: 12, File: 12}},
	}
	var buf bytes.Buffer
	w, err := image.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func() error{
		func() error {
			return w.WriteHeader(&image.Header{Tool: "test", Machine: "x86_64", Root: 100, Processes: 3})
		},
		func() error { return w.WriteProcess(root) },
		func() error { return w.WriteProcess(child) },
		func() error {
			return w.WriteProcess(&image.Process{PID: 102, PPID: 100, Comm: "dead", Zombie: true, ExitStatus: 42 << 8})
		},
		func() error { return w.WriteFileData(1, []byte("abc")) },
		func() error { return w.WriteFileData(2, []byte("ghost")) },
		w.End,
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	return buf.Bytes()
}

// TestShowTree checks that `ckpt show` prints an image of several
// processes whose fds use files listed by another process, one line per
// fd saying its number, kind and what it is, and that --json gives the
// same processes.
func TestShowTree(t *testing.T) {
	s, err := summarize(bytes.NewReader(treeImage(t)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printSummary(&out, s)
	text := out.String()
	for _, want := range []string{
		"process 100 (root)",
		"process 101 (child) ppid 100",
		"process 102 (dead) ppid 100 pgid 0 sid 0: zombie, wait status 0x2a00",
		"  0 chr      /dev/null (device 1:3) (file 3",
		"  1 reg      /tmp/log (file 0, flags 02001, pos 12)",
		"  0 pipe     pipe:[555] read end, 3 bytes buffered (file 1, flags 0, shared)",
		"  1 reg      /tmp/log (file 0, flags 02001, pos 12, shared)",
		"  3 pipe     pipe:[555] write end (file 2, flags 0, cloexec, shared)",
		"  4 eventfd  counter 7 (file 4",
		"  5 timerfd  monotonic, next in 500ms then every 1s (file 5",
		"  6 signalfd signals 10,15 (file 6",
		"  7 epoll    1 watched: fd 4 events 0x1 (file 7",
		"  8 pidfd    process 100 (file 8",
		"  9 socket   tcp 127.0.0.1:8080 listening, backlog 16 (file 9",
		" 10 dir      /srv (file 10, flags 0, pos 0)",
		" 11 reg      /tmp/gone (deleted, content in image) (file 11",
		" 12 tty      /dev/pts/2 (device 136:2) (file 12",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("ckpt show does not say %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "(file "); n != 15 {
		t.Errorf("ckpt show has %d fd lines, want 15:\n%s", n, text)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Processes []struct {
			PID int `json:"pid"`
		} `json:"processes"`
		FileData int64 `json:"file_data_bytes"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Processes) != 3 || back.Processes[1].PID != 101 || back.FileData != 8 {
		t.Errorf("ckpt show --json: %s", b)
	}
}

package proc

import (
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/google/go-cmp/cmp"
)

// The files under testdata/proc/1848 were captured on a test machine from a
// small Go program (one thread shown) holding a pipe (fd 5), an eventfd
// (7), a timerfd (8), a signalfd (9), an epoll set (11), a pidfd (12), an
// inotify fd (13) and /etc/hostname at offset 3 (14), with a mapped deleted
// file and a mapped file named "ckpt-capture (deleted)".
const (
	testRoot = "testdata/proc"
	testPID  = 1848
)

func TestReadStatTestdata(t *testing.T) {
	want := &Stat{
		PID: 1848, Comm: "capture", State: 'R', PPID: 1813, PGRP: 1805, Session: 10709,
		Flags: 4194304, Threads: 6,
		StartCode: 4194304, EndCode: 4917425, StartStack: 140724015283104,
		StartData: 5869568, EndData: 5913600, StartBrk: 566763520,
		ArgStart: 140724015286877, ArgEnd: 140724015286934, EnvStart: 140724015286934, EnvEnd: 140724015288272,
	}
	for _, tid := range []sys.TID{0, testPID} {
		got, err := readStat(testRoot, testPID, tid)
		if err != nil {
			t.Fatalf("tid %d: %v", tid, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("tid %d (-want +got):\n%s", tid, d)
		}
	}
	if _, err := readStat(testRoot, 1, 0); err == nil {
		t.Error("a missing process read without error")
	}
}

func TestParseStatTail(t *testing.T) {
	fields := func(n int) string { return strings.Repeat(" 7", n) }
	tests := []struct {
		name    string
		line    string
		want    Stat
		wantErr string
	}{
		{"comm with parens and spaces", "12 (a) (b c) R" + fields(41) + " 1 2 3 4 5 6 7 9\n",
			Stat{StartData: 1, EndData: 2, StartBrk: 3, ArgStart: 4, ArgEnd: 5, EnvStart: 6, EnvEnd: 7, ExitCode: 9}, ""},
		{"short", "12 (a) R 1 2 3\n", Stat{}, "want at least 52"},
		{"no comm", "12 a R", Stat{}, "malformed"},
		{"bad number", "12 (a) R" + fields(41) + " 1 2 x 4 5 6 7 9", Stat{}, "field 47"},
		{"bad exit code", "12 (a) R" + fields(41) + " 1 2 3 4 5 6 7 z", Stat{}, "field 52"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatTail([]byte(tt.line))
			checkParse(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestReadStatusTestdata(t *testing.T) {
	got, err := readStatus(testRoot, testPID)
	if err != nil {
		t.Fatal(err)
	}
	want := &Status{
		TGID: 1848, CapPrm: 0x1fffeffffff, CapEff: 0x1fffeffffff, CapBnd: 0x1fffeffffff,
		State: 'R', Umask: 0o22, SigCgt: 0xfffffffd7fc1feff, UntagMask: ^uint64(0),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestParseStatus(t *testing.T) {
	const base = "Name:\tx\nUmask:\t0027\nState:\tS (sleeping)\nTgid:\t812\nTracerPid:\t77\n" +
		"Uid:\t1000\t1001\t1002\t1003\nGid:\t5\t6\t7\t8\nGroups:\t4 24 27 \nVmLck:\t      12 kB\n" +
		"SigPnd:\t0000000000000100\nShdPnd:\t0000000000000200\nSigBlk:\t0000000000010000\n" +
		"SigIgn:\t0000000000001000\nSigCgt:\t0000000180004002\n" +
		"CapInh:\t0000000000000001\nCapPrm:\t0000000000000002\nCapEff:\t0000000000000004\n" +
		"CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000008\nNoNewPrivs:\t1\nSeccomp:\t2\n" +
		"untag_mask:\t0x7e00000000000000\nx86_Thread_features:\tshstk wrss \n"
	tests := []struct {
		name    string
		text    string
		want    *Status
		wantErr string
	}{
		{"all", base, &Status{State: 'S', Umask: 0o27, TracerPID: 77, Groups: []int{4, 24, 27}, TGID: 812,
			UID: [4]int{1000, 1001, 1002, 1003}, GID: [4]int{5, 6, 7, 8}, VmLck: 12 << 10,
			CapInh: 1, CapPrm: 2, CapEff: 4, CapBnd: 0x1ffffffffff, CapAmb: 8,
			SigPnd: 0x100, ShdPnd: 0x200, SigBlk: 0x10000, SigIgn: 0x1000, SigCgt: 0x180004002,
			NoNewPrivs: true, Seccomp: 2, UntagMask: 0x7e00000000000000, X86ThreadFeatures: "shstk wrss"}, ""},
		{"no seccomp, LAM or shadow stack lines", strings.Split(base, "Seccomp:")[0], &Status{State: 'S', Umask: 0o27, TracerPID: 77,
			Groups: []int{4, 24, 27}, TGID: 812, UID: [4]int{1000, 1001, 1002, 1003}, GID: [4]int{5, 6, 7, 8}, VmLck: 12 << 10,
			CapInh: 1, CapPrm: 2, CapEff: 4, CapBnd: 0x1ffffffffff, CapAmb: 8, SigPnd: 0x100, ShdPnd: 0x200, SigBlk: 0x10000, SigIgn: 0x1000, SigCgt: 0x180004002,
			NoNewPrivs: true, UntagMask: ^uint64(0)}, ""},
		{"bad untag_mask", strings.Replace(base, "0x7e00000000000000", "0xzz", 1), nil, "untag_mask"},
		{"missing SigCgt", strings.Replace(base, "SigCgt:\t0000000180004002\n", "", 1), nil, "no SigCgt"},
		{"bad mask", strings.Replace(base, "0000000000010000", "00000000000g0000", 1), nil, "SigBlk"},
		{"bad umask", strings.Replace(base, "0027", "0089", 1), nil, "Umask"},
		{"bad group", strings.Replace(base, "4 24 27", "4 x", 1), nil, "Groups"},
		{"empty state", strings.Replace(base, "S (sleeping)", "", 1), nil, "State"},
		{"missing Tgid", strings.Replace(base, "Tgid:\t812\n", "", 1), nil, "no Tgid"},
		{"three uids", strings.Replace(base, "\t1003", "", 1), nil, "Uid"},
		{"bad gid", strings.Replace(base, "\t7\t", "\tx\t", 1), nil, "Gid"},
		{"bad cap", strings.Replace(base, "000001ffffffffff", "0000q1ffffffffff", 1), nil, "CapBnd"},
		{"VmLck not in kB", strings.Replace(base, "12 kB", "12 MB", 1), nil, "VmLck"},
		{"no VmLck (a zombie)", strings.Replace(base, "VmLck:\t      12 kB\n", "", 1), &Status{State: 'S', Umask: 0o27, TracerPID: 77,
			Groups: []int{4, 24, 27}, TGID: 812, UID: [4]int{1000, 1001, 1002, 1003}, GID: [4]int{5, 6, 7, 8},
			CapInh: 1, CapPrm: 2, CapEff: 4, CapBnd: 0x1ffffffffff, CapAmb: 8,
			SigPnd: 0x100, ShdPnd: 0x200, SigBlk: 0x10000, SigIgn: 0x1000, SigCgt: 0x180004002,
			NoNewPrivs: true, Seccomp: 2, UntagMask: 0x7e00000000000000, X86ThreadFeatures: "shstk wrss"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tt.text))
			checkParse(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestReadLimitsTestdata(t *testing.T) {
	got, err := readLimits(testRoot, testPID)
	if err != nil {
		t.Fatal(err)
	}
	inf := ^uint64(0)
	want := map[int]Limit{
		0:  {Name: "Max cpu time", Resource: 0, Cur: inf, Max: inf},
		3:  {Name: "Max stack size", Resource: 3, Cur: 8388608, Max: inf},
		4:  {Name: "Max core file size", Resource: 4, Cur: 0, Max: inf},
		7:  {Name: "Max open files", Resource: 7, Cur: 20000, Max: 20000},
		13: {Name: "Max nice priority", Resource: 13, Cur: 0, Max: 0},
		15: {Name: "Max realtime timeout", Resource: 15, Cur: inf, Max: inf},
	}
	if len(got) != 16 {
		t.Fatalf("%d limits, want 16", len(got))
	}
	for i, l := range got {
		if l.Resource != i {
			t.Errorf("limit %d is resource %d", i, l.Resource)
		}
		if w, ok := want[i]; ok && l != w {
			t.Errorf("limit %d = %+v, want %+v", i, l, w)
		}
	}
}

func TestParseLimits(t *testing.T) {
	good := "Limit Soft Limit Hard Limit Units\n" +
		"Max cpu time              1                    2                    seconds\n" +
		"Max file size             3                    4                    bytes\n"
	tests := []struct {
		name    string
		text    string
		wantErr string
	}{
		{"missing resources", good, "2 resource limits, want 16"},
		{"bad soft", strings.Replace(good, " 1 ", " x ", 1), "Max cpu time"},
		{"bad hard", strings.Replace(good, " 4 ", " -4 ", 1), "Max file size"},
		{"one column", "Max cpu time 1\n", "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseLimits([]byte(tt.text)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestReadFDInfoTestdata(t *testing.T) {
	tests := []struct {
		fd    sys.TargetFD
		want  FDInfo // Extra and Lines not compared
		check func(t *testing.T, fi *FDInfo)
	}{
		{5, FDInfo{Flags: 0o2004000, MntID: 16, Ino: 103160}, nil},
		{14, FDInfo{Pos: 3, Flags: 0o2100000, MntID: 27, Ino: 611}, nil},
		{7, FDInfo{Flags: 0o2000002, MntID: 17, Ino: 1030}, func(t *testing.T, fi *FDInfo) {
			e, err := fi.Eventfd()
			if err != nil || e != (Eventfd{Count: 5, Semaphore: true}) {
				t.Errorf("Eventfd() = %+v, %v", e, err)
			}
		}},
		{8, FDInfo{Flags: 0o2004002, MntID: 17, Ino: 1030}, func(t *testing.T, fi *FDInfo) {
			tf, err := fi.Timerfd()
			want := Timerfd{Clock: 1, ValueNs: 99_995_740_411, IntervalNs: 2_000_000_500}
			if err != nil || tf != want {
				t.Errorf("Timerfd() = %+v, %v; want %+v", tf, err, want)
			}
		}},
		{9, FDInfo{Flags: 0o2000002, MntID: 17, Ino: 1030}, func(t *testing.T, fi *FDInfo) {
			m, err := fi.Signalfd()
			if err != nil || m != 1<<9|1<<14|1<<39 { // SIGUSR1, SIGTERM, signal 40
				t.Errorf("Signalfd() = %#x, %v", m, err)
			}
		}},
		{11, FDInfo{Flags: 0o2000002, MntID: 17, Ino: 1030}, func(t *testing.T, fi *FDInfo) {
			items, err := fi.EpollItems()
			want := []EpollItem{
				{FD: 7, Events: 0x1d, Data: 0x1234, Ino: 0x406, Sdev: 0x10},
				{FD: 5, Events: 0x80000019, Data: 0x700000005, Ino: 0x192f8, Sdev: 0xf},
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, items); d != "" {
				t.Errorf("EpollItems (-want +got):\n%s", d)
			}
		}},
		{12, FDInfo{Flags: 0o2000002, MntID: 4, Ino: 34966}, func(t *testing.T, fi *FDInfo) {
			if p, err := fi.PidfdPID(); p != 1848 || err != nil {
				t.Errorf("PidfdPID() = %d, %v", p, err)
			}
		}},
		{13, FDInfo{Flags: 0o2000000, MntID: 17, Ino: 1030, Inotify: []InotifyWatch{
			{WD: 2, Ino: 0x13, Sdev: 0xfe00000, Mask: 2},
			{WD: 1, Ino: 0x3c4a3, Sdev: 0xfe00000, Mask: 0x300},
		}}, nil},
	}
	for _, tt := range tests {
		fi, err := readFDInfo(testRoot, testPID, tt.fd)
		if err != nil {
			t.Fatalf("fd %d: %v", tt.fd, err)
		}
		got := *fi
		got.Extra, got.Lines = nil, nil
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("fd %d (-want +got):\n%s", tt.fd, d)
		}
		if tt.check != nil {
			tt.check(t, fi)
		}
		// The other kinds' views refuse an fd of another kind.
		if tt.fd != 7 {
			if _, err := fi.Eventfd(); err == nil {
				t.Errorf("fd %d: Eventfd() without error", tt.fd)
			}
		}
		if tt.fd != 8 {
			if _, err := fi.Timerfd(); err == nil {
				t.Errorf("fd %d: Timerfd() without error", tt.fd)
			}
		}
	}
	if _, err := readFDInfo(testRoot, testPID, 99); err == nil {
		t.Error("missing fd read without error")
	}
}

func TestFDInfoViewsMalformed(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		view    func(*FDInfo) error
		wantErr string
	}{
		{"eventfd count", "eventfd-count: zz\n", func(f *FDInfo) error { _, err := f.Eventfd(); return err }, "eventfd-count"},
		{"timerfd clock", "clockid: x\nticks: 0\nsettime flags: 0\nit_value: (0, 0)\nit_interval: (0, 0)\n",
			func(f *FDInfo) error { _, err := f.Timerfd(); return err }, "clockid"},
		{"timerfd ticks", "clockid: 1\nticks: -1\nsettime flags: 0\nit_value: (0, 0)\nit_interval: (0, 0)\n",
			func(f *FDInfo) error { _, err := f.Timerfd(); return err }, "ticks"},
		{"timerfd flags", "clockid: 1\nticks: 0\nsettime flags: 9\nit_value: (0, 0)\nit_interval: (0, 0)\n",
			func(f *FDInfo) error { _, err := f.Timerfd(); return err }, "settime flags"},
		{"timerfd value", "clockid: 1\nticks: 0\nsettime flags: 0\nit_value: 0\nit_interval: (0, 0)\n",
			func(f *FDInfo) error { _, err := f.Timerfd(); return err }, "it_value"},
		{"timerfd interval range", "clockid: 1\nticks: 0\nsettime flags: 0\nit_value: (0, 0)\nit_interval: (0, 1000000000)\n",
			func(f *FDInfo) error { _, err := f.Timerfd(); return err }, "it_interval"},
		{"sigmask", "sigmask: q\n", func(f *FDInfo) error { _, err := f.Signalfd(); return err }, "sigmask"},
		{"no sigmask", "pos: 0\n", func(f *FDInfo) error { _, err := f.Signalfd(); return err }, "no sigmask"},
		{"epoll data", "tfd: 5 events: 19 data: xyz pos:0 ino:1 sdev:2\n",
			func(f *FDInfo) error { _, err := f.EpollItems(); return err }, "data"},
		{"epoll no events", "tfd: 5 data: 1\n", func(f *FDInfo) error { _, err := f.EpollItems(); return err }, "want tfd, events and data"},
		{"epoll junk", "tfd: 5 events 1 data: 1\n", func(f *FDInfo) error { _, err := f.EpollItems(); return err }, "field"},
		{"pidfd", "Pid: me\n", func(f *FDInfo) error { _, err := f.PidfdPID(); return err }, "Pid"},
		{"no pidfd", "pos: 0\n", func(f *FDInfo) error { _, err := f.PidfdPID(); return err }, "no Pid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fi := &FDInfo{}
			fi.Extra, fi.Lines = parseFDInfoLines([]byte(tt.text))
			if err := tt.view(fi); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestReadSmapsTestdata(t *testing.T) {
	maps, err := readSmaps(testRoot, testPID)
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 30 {
		t.Errorf("%d mappings, want 30", len(maps))
	}
	byPath := map[string]Mapping{}
	for _, m := range maps {
		if m.VmFlags == nil {
			t.Errorf("mapping %#x-%#x has no VmFlags", m.Start, m.End)
		}
		byPath[m.Path] = m
	}
	tests := []struct {
		path  string
		perms string
		inode uint64
		flags []string
	}{
		{"/tmp/ckpt-capture (deleted)", "r--s", 9982098, []string{"rd", "mr", "me", "ms"}},
		{"/tmp/ckpt-capture-gone (deleted)", "r--p", 9982100, []string{"rd", "mr", "mw", "me"}},
		{"[stack]", "rw-p", 0, []string{"gd"}},
	}
	for _, tt := range tests {
		m, ok := byPath[tt.path]
		if !ok {
			t.Errorf("no mapping %q", tt.path)
			continue
		}
		if m.Perms != tt.perms || m.Inode != tt.inode || (tt.inode != 0 && (m.Major != 0xfe || m.Minor != 0)) {
			t.Errorf("%s: perms %s inode %d dev %x:%x", tt.path, m.Perms, m.Inode, m.Major, m.Minor)
		}
		for _, f := range tt.flags {
			if !m.VmFlags[f] {
				t.Errorf("%s: no VmFlag %s in %v", tt.path, f, m.VmFlags)
			}
		}
	}
	dontfork := 0
	for _, m := range maps {
		if m.KernelPageSize != 4096 {
			t.Errorf("%#x-%#x: KernelPageSize %d, want 4096", m.Start, m.End, m.KernelPageSize)
		}
		if m.VmFlags["dc"] {
			dontfork++
		}
	}
	if dontfork != 1 {
		t.Errorf("%d MADV_DONTFORK mappings, want 1", dontfork)
	}
}

func TestParseSmaps(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []Mapping
		wantErr string
	}{
		{"two", "00400000-00401000 r-xp 00001000 fe:01 42    /bin/a b (deleted)\nSize: 4 kB\nVmFlags: rd ex \n" +
			"7f00-8000 rw-s 00000000 00:05 7 /dev/zero (deleted)\nVmFlags: rd wr sh\n",
			[]Mapping{
				{Start: 0x400000, End: 0x401000, Perms: "r-xp", Offset: 0x1000, Major: 0xfe, Minor: 1, Inode: 42,
					Path: "/bin/a b (deleted)", VmFlags: map[string]bool{"rd": true, "ex": true}},
				{Start: 0x7f00, End: 0x8000, Perms: "rw-s", Minor: 5, Inode: 7, Path: "/dev/zero (deleted)",
					VmFlags: map[string]bool{"rd": true, "wr": true, "sh": true}},
			}, ""},
		{"huge page size", "7f00000-7f400000 rw-p 0 00:11 9 /anon_hugepage (deleted)\nKernelPageSize:     2048 kB\nVmFlags: rd wr ht\n",
			[]Mapping{{Start: 0x7f00000, End: 0x7f400000, Perms: "rw-p", Minor: 0x11, Inode: 9, Path: "/anon_hugepage (deleted)",
				KernelPageSize: 2 << 20, VmFlags: map[string]bool{"rd": true, "wr": true, "ht": true}}}, ""},
		{"bad page size", "1-2 rw-p 0 0:0 0\nKernelPageSize: 4 MB\n", nil, `KernelPageSize " 4 MB": not a size in kB`},
		{"flags first", "VmFlags: rd\n", nil, "VmFlags before a mapping"},
		{"junk lines skipped", "hello\n1-2 rw-p 0 0:0 0\nVmFlags:\n", []Mapping{{Start: 1, End: 2, Perms: "rw-p", VmFlags: map[string]bool{}}}, ""},
		{"bad lines skipped", "1-x rw-p 0 0:0 0\n2-1 rw-p 0 0:0 0\n1-2 rwp 0 0:0 0\n1-2 rw-p z 0:0 0\n1-2 rw-p 0 00 0\n1-2 rw-p 0 0:0 q\n1-2 rw-p 0 g:0 0\n", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSmaps(strings.NewReader(tt.text))
			checkParse(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestReadMountInfoTestdata(t *testing.T) {
	mounts, err := readMountInfo(testRoot, testPID)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 21 {
		t.Errorf("%d mounts, want 21", len(mounts))
	}
	m := MountByID(mounts, 27)
	if m == nil || m.MountPoint != "/" || m.FSType != "ext4" || m.MajorMinorVer != "254:0" {
		t.Errorf("mount 27 = %+v", m)
	}
	if MountByID(mounts, -1) != nil {
		t.Error("found mount -1")
	}
}

// testdata/proc/1848/timers comes from another small program (PID 951)
// with three timers: SIGEV_SIGNAL, SIGEV_NONE and SIGEV_THREAD_ID.
func TestReadTimersTestdata(t *testing.T) {
	got, err := readTimers(testRoot, testPID)
	if err != nil {
		t.Fatal(err)
	}
	want := []Timer{
		{ID: 2, Signal: 36, SigValue: 77, Notify: 4, NotifyTID: 951, Clock: 7},
		{ID: 1, Signal: 14, SigValue: 0x1234, Notify: 1, Clock: 0},
		{ID: 0, Signal: 14, SigValue: 0x1234, Notify: 0, Clock: 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if none, err := readTimers(testRoot, 1); none != nil || err != nil {
		t.Errorf("no timers file: %v, %v", none, err)
	}
}

func TestParseTimers(t *testing.T) {
	const one = "ID: 3\nsignal: 10/00000000000000ff\nnotify: thread/pid.5\nClockID: 0\n"
	tests := []struct {
		name    string
		text    string
		want    []Timer
		wantErr string
	}{
		{"thread", one, []Timer{{ID: 3, Signal: 10, SigValue: 0xff, Notify: 2}}, ""},
		{"empty", "", nil, ""},
		{"field first", "signal: 1/0\n", nil, "before an ID"},
		{"bad id", "ID: x\n", nil, "ID"},
		{"bad signal", strings.Replace(one, "10/", "x/", 1), nil, "signal"},
		{"bad value", strings.Replace(one, "/00000000000000ff", "/zz", 1), nil, "signal"},
		{"bad notify", strings.Replace(one, "thread/", "wave/", 1), nil, "notify"},
		{"no pid", strings.Replace(one, "pid.5", "5", 1), nil, "notify"},
		{"bad tid", strings.Replace(one, "pid.5", "tid.q", 1), nil, "notify"},
		{"bad clock", strings.Replace(one, "ClockID: 0", "ClockID: c", 1), nil, "ClockID"},
		{"junk", one + "junk\n", nil, "line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTimers([]byte(tt.text))
			checkParse(t, got, err, tt.want, tt.wantErr)
		})
	}
}

// checkParse checks what a parser returned against a table row: an error
// containing wantErr when it is set, else no error and want.
func checkParse[T any](t *testing.T, got T, err error, want T, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestScanGroupsTestdata(t *testing.T) {
	var got []Groups
	if err := scanGroups(testRoot, nil, func(g Groups) error { got = append(got, g); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []Groups{{PID: 1848, Comm: "capture", PGRP: 1805, Session: 10709}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestParseGroups(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Groups
		wantErr string
	}{
		{"comm with parens and spaces", "12 (a) (b c) S 1 34 56 0 -1\n", Groups{PID: 12, Comm: "a) (b c", PGRP: 34, Session: 56}, ""},
		{"ends after session", "7 (x) R 1 2 3", Groups{PID: 7, Comm: "x", PGRP: 2, Session: 3}, ""},
		{"short", "12 (a) R 1 2\n", Groups{}, "want at least 6"},
		{"no comm", "12 a R 1 2 3", Groups{}, "malformed"},
		{"bad pid", "x (a) R 1 2 3", Groups{}, "field 1"},
		{"bad group", "12 (a) R 1 z 3", Groups{}, "field 5"},
		{"bad session", "12 (a) R 1 2 -", Groups{}, "field 6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseGroups([]byte(tt.line))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestReadMapsTestdata(t *testing.T) {
	// The maps file is the header lines of the captured smaps: the same
	// mappings without VmFlags, protection keys and page sizes.
	want, err := readSmaps(testRoot, testPID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i].VmFlags, want[i].ProtectionKey, want[i].KernelPageSize = nil, 0, 0
	}
	got, err := readMaps(testRoot, testPID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-smaps +maps):\n%s", d)
	}
	if _, err := readMaps(testRoot, 1); err == nil {
		t.Error("a missing process read without error")
	}
}

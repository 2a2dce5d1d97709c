package proc

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seed adds the captured file (relative to testdata/proc/1848) to f.
func seed(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(testRoot, "1848", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseStatTail(f *testing.F) {
	seed(f, "stat", "task/1848/stat")
	f.Add([]byte("1 ()) R"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseStatTail(b)
		if err == nil && bytes.LastIndexByte(b, ')') < 0 {
			t.Fatalf("parsed %+v without a comm", s)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	seed(f, "status")
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseStatus(b)
		if err == nil && !bytes.Contains(b, []byte("SigCgt:")) {
			t.Fatalf("parsed %+v without SigCgt", s)
		}
	})
}

func FuzzParseLimits(f *testing.F) {
	seed(f, "limits")
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := parseLimits(b)
		if err == nil && len(l) != 16 {
			t.Fatalf("%d limits without error", len(l))
		}
	})
}

func FuzzParseSmaps(f *testing.F) {
	seed(f, "smaps")
	f.Fuzz(func(t *testing.T, b []byte) {
		maps, err := parseSmaps(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.End < m.Start || len(m.Perms) != 4 {
				t.Fatalf("bad mapping %+v", m)
			}
		}
	})
}

func FuzzParseFDInfo(f *testing.F) {
	for _, fd := range []string{"5", "7", "8", "9", "11", "12", "13", "14"} {
		seed(f, "fdinfo/"+fd)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fi := &FDInfo{}
		fi.Extra, fi.Lines = parseFDInfoLines(b)
		fi.Eventfd()
		fi.Signalfd()
		fi.PidfdPID()
		if tf, err := fi.Timerfd(); err == nil && (tf.ValueNs < 0 || tf.IntervalNs < 0) {
			t.Fatalf("negative time %+v", tf)
		}
		items, err := fi.EpollItems()
		if err == nil {
			n := 0
			for _, l := range fi.Lines {
				if strings.HasPrefix(l, "tfd:") {
					n++
				}
			}
			if n != len(items) {
				t.Fatalf("%d items from %d tfd lines", len(items), n)
			}
		}
	})
}

func FuzzParseTimers(f *testing.F) {
	seed(f, "timers")
	f.Fuzz(func(t *testing.T, b []byte) {
		timers, err := parseTimers(b)
		if err != nil {
			return
		}
		if n := bytes.Count(b, []byte("ID:")); len(timers) > n {
			t.Fatalf("%d timers from %d ID lines", len(timers), n)
		}
	})
}

func FuzzParseSysVIPC(f *testing.F) {
	for _, n := range []string{"shm", "sem", "msg"} {
		b, err := os.ReadFile(filepath.Join(testRoot, "sysvipc", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := parseSysVIPC(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(rows) > bytes.Count(b, []byte("\n"))+1 {
			t.Fatalf("%d rows from %d lines", len(rows), bytes.Count(b, []byte("\n"))+1)
		}
		for _, r := range rows {
			if len(r) != len(rows[0]) {
				t.Fatalf("rows of %d and %d columns", len(rows[0]), len(r))
			}
		}
	})
}

func FuzzParseNUMAMaps(f *testing.F) {
	seed(f, "numa_maps")
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := parseNUMAMaps(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, p := range ps {
			if p.Policy == "" {
				t.Fatalf("empty policy %+v", p)
			}
		}
	})
}

func FuzzParseGroups(f *testing.F) {
	seed(f, "stat", "task/1848/stat")
	f.Add([]byte("1 ()) R 1 2 3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := parseGroups(b)
		if err == nil && bytes.LastIndexByte(b, ')') < 0 {
			t.Fatalf("parsed %+v without a comm", g)
		}
	})
}

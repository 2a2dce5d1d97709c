package fdkind

import "testing"

// FuzzParseLockLine: no lock line of fdinfo or /proc/locks makes the
// parser panic, and a lock it accepts has a kind.
func FuzzParseLockLine(f *testing.F) {
	for _, l := range []string{
		"1: POSIX  ADVISORY  WRITE 29036 fe:00:9978949 0 9",
		"\t2: POSIX  ADVISORY  READ 29036 fe:00:9978949 100 EOF",
		"1: OFDLCK ADVISORY  WRITE -1 fe:00:9978949 50 54",
		"3: FLOCK  ADVISORY  READ 77 08:01:12 0 EOF",
		"1: -> POSIX  ADVISORY  WRITE 5 fe:00:1 0 EOF",
		"1: LEASE  ACTIVE    READ 5 fe:00:1 0 EOF",
	} {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line string) {
		l, ok, err := parseLockLine(line)
		if err == nil && ok && l.lock.Kind == "" {
			t.Fatalf("%q: a lock without a kind: %+v", line, l)
		}
	})
}

package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// OpenFDs lists this process's open fds, each as "N TARGET" (its
// /proc/self/fd link), in fd order: compared before and after a dump or
// restore run in-process, it shows the fds they left open.
func OpenFDs(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the directory's own fd, closed meanwhile
		}
		fds = append(fds, e.Name()+" "+link)
	}
	return fds
}

package proc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ReadSysVIPC reads the table /proc/sysvipc/NAME ("shm", "sem" or "msg"):
// one map of column name (its header line: key, shmid, perms, nsems,
// lspid...) to value per row. procfs has no reader for /proc/sysvipc.
// A kernel without System V IPC has no such file (an error for which
// os.IsNotExist is true).
func ReadSysVIPC(name string) ([]map[string]string, error) { return readSysVIPC(root, name) }

func readSysVIPC(root, name string) ([]map[string]string, error) {
	path := filepath.Join(root, "sysvipc", name)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := parseSysVIPC(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// parseSysVIPC parses a /proc/sysvipc table: a header line naming the
// columns, then one line of as many whitespace-separated values per
// object.
func parseSysVIPC(r io.Reader) ([]map[string]string, error) {
	sc := bufio.NewScanner(r)
	var cols []string
	var out []map[string]string
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if cols == nil {
			if len(fs) == 0 {
				return nil, fmt.Errorf("no header line")
			}
			cols = fs
			continue
		}
		if len(fs) != len(cols) {
			return nil, fmt.Errorf("line %q has %d fields for %d columns", sc.Text(), len(fs), len(cols))
		}
		row := make(map[string]string, len(cols))
		for i, c := range cols {
			row[c] = fs[i]
		}
		out = append(out, row)
	}
	return out, sc.Err()
}

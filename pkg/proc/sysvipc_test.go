package proc

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testdata/proc/sysvipc holds the tables as a test machine showed them
// with one shared memory segment (8192 bytes, mode 0640), one set of 3
// semaphores and one empty message queue, made with ipcmk.
func TestReadSysVIPCTestdata(t *testing.T) {
	tests := []struct {
		name string
		want map[string]string // some columns of the one row
	}{
		{"shm", map[string]string{"key": "242014265", "shmid": "2785306", "perms": "640", "size": "8192", "cpid": "31023", "nattch": "0", "swap": "0"}},
		{"sem", map[string]string{"key": "438092791", "semid": "32770", "perms": "600", "nsems": "3", "ctime": "1795548329"}},
		{"msg", map[string]string{"key": "1933709089", "msqid": "262197", "perms": "644", "qnum": "0", "lspid": "0", "lrpid": "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := readSysVIPC(testRoot, tt.name)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 {
				t.Fatalf("%d rows, want 1", len(rows))
			}
			for k, v := range tt.want {
				if rows[0][k] != v {
					t.Errorf("%s = %q, want %q", k, rows[0][k], v)
				}
			}
		})
	}
	if _, err := readSysVIPC(testRoot, "none"); !os.IsNotExist(err) {
		t.Errorf("missing table: %v, want not-exist", err)
	}
}

func TestParseSysVIPC(t *testing.T) {
	const head = "       key      semid perms      nsems\n"
	tests := []struct {
		name    string
		text    string
		want    []map[string]string
		wantErr string
	}{
		{"header only", head, nil, ""},
		{"empty", "", nil, ""},
		{"two rows", head + " 1 2 600 3\n-1 5 666 1\n", []map[string]string{
			{"key": "1", "semid": "2", "perms": "600", "nsems": "3"},
			{"key": "-1", "semid": "5", "perms": "666", "nsems": "1"},
		}, ""},
		{"short row", head + " 1 2 600\n", nil, "3 fields for 4 columns"},
		{"long row", head + " 1 2 600 3 4\n", nil, "5 fields for 4 columns"},
		{"blank header", "\n 1 2\n", nil, "no header line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSysVIPC(strings.NewReader(tt.text))
			checkParse(t, got, err, tt.want, tt.wantErr)
		})
	}
}

// testdata/proc/1848/numa_maps comes from cat on a test machine (one
// node, every mapping with the default policy).
func TestReadNUMAPoliciesTestdata(t *testing.T) {
	got, err := readNUMAPolicies(testRoot, testPID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 37 {
		t.Fatalf("%d mappings, want 37", len(got))
	}
	first, last := NUMAPolicy{Start: 0x555c6f508000, Policy: "default"}, NUMAPolicy{Start: 0x7ffce9638000, Policy: "default"}
	if d := cmp.Diff([]NUMAPolicy{first, last}, []NUMAPolicy{got[0], got[36]}); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, err := readNUMAPolicies(testRoot, 1); !os.IsNotExist(err) {
		t.Errorf("missing process: %v, want not-exist", err)
	}
}

func TestParseNUMAMaps(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []NUMAPolicy
		wantErr string
	}{
		{"policies", "7f0000000000 bind:0-1 anon=1 dirty=1 N0=1 kernelpagesize_kB=4\n" +
			"7f0000001000 interleave:0 file=/a\\040b mapped=1\n7f0000002000 prefer:1\n7f0000003000 local\n",
			[]NUMAPolicy{{0x7f0000000000, "bind:0-1"}, {0x7f0000001000, "interleave:0"}, {0x7f0000002000, "prefer:1"}, {0x7f0000003000, "local"}}, ""},
		{"empty", "", nil, ""},
		{"no policy", "7f0000000000\n", nil, "no policy"},
		{"bad address", "7g00 default\n", nil, "address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNUMAMaps(strings.NewReader(tt.text))
			checkParse(t, got, err, tt.want, tt.wantErr)
		})
	}
}

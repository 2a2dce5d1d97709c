package inventory

import (
	"bufio"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/inventory.md from the table")

// kernelVmFlags is the kernel's documented list of smaps VmFlags letters
// (Documentation/filesystems/proc.rst, "VmFlags" of /proc/PID/smaps, as of
// Linux 6.18), architecture-specific ones included.
var kernelVmFlags = strings.Fields(`rd wr ex sh mr mw me ms gd pf lf lo io sr rr dc de ac nr ht sf ar wf dd sd mm hg nh mg bt mt um uw ui ss sl dp`)

// TestStatusKeys fails on any key of this kernel's /proc/self/status (and
// of a thread's status) that the table does not list.
func TestStatusKeys(t *testing.T) {
	listed := StatusKeys()
	for _, path := range []string{"/proc/self/status", "/proc/thread-self/status"} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, _, ok := strings.Cut(sc.Text(), ":")
			if ok && !listed[k] {
				t.Errorf("%s key %q is not in the inventory", path, k)
			}
		}
		f.Close()
	}
}

// TestVmFlags fails on any VmFlags letter pair seen in the smaps of this
// machine's processes, or in the kernel's documented list, that the table
// does not list.
func TestVmFlags(t *testing.T) {
	listed := VmFlags()
	seen := map[string]string{}
	for _, fl := range kernelVmFlags {
		seen[fl] = "Documentation/filesystems/proc.rst"
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/smaps")
	paths = append(paths, "/proc/self/smaps")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone, or a kernel thread
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmFlags:"); ok {
				for _, fl := range strings.Fields(rest) {
					if _, ok := seen[fl]; !ok {
						seen[fl] = p
					}
				}
			}
		}
	}
	for fl, where := range seen {
		if !listed[fl] {
			t.Errorf("VmFlags %q (seen in %s) is not in the inventory", fl, where)
		}
	}
}

// TestPrctlOptions fails on any PR_* constant of golang.org/x/sys/unix
// that is neither a prctl option of the table nor an argument value of
// one (PrctlArgs), and on table options x/sys does not know.
func TestPrctlOptions(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	if err != nil {
		t.Fatalf("go list golang.org/x/sys: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "unix", "zerrors_linux.go")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(PR_[A-Z0-9_]+)\s+=`).FindAllStringSubmatch(string(b), -1) {
		names[m[1]] = true
	}
	if len(names) < 150 {
		t.Fatalf("only %d PR_ constants in %s: the parser is wrong", len(names), src)
	}
	for n := range names {
		if !PrctlCovered(n) {
			t.Errorf("prctl %s (golang.org/x/sys/unix) is not in the inventory", n)
		}
	}
	for n := range PrctlOptions() {
		if !names[n] {
			t.Errorf("the inventory lists prctl %s, which golang.org/x/sys/unix does not define", n)
		}
	}
	for prefix, opt := range PrctlArgs() {
		if !PrctlOptions()[opt] {
			t.Errorf("PrctlArgs %s belongs to %s, which no row lists", prefix, opt)
		}
	}
}

// TestRows checks every row is complete.
func TestRows(t *testing.T) {
	fams := map[string]bool{}
	for _, f := range Families() {
		fams[f] = true
	}
	names := map[string]bool{}
	for _, a := range All() {
		if a.Name == "" || names[a.Name] {
			t.Errorf("row %q: empty or duplicate name", a.Name)
		}
		names[a.Name] = true
		if !fams[a.Family] {
			t.Errorf("row %q: unknown family %q", a.Name, a.Family)
		}
		switch a.Status {
		case Restored:
			if a.Save == "" || a.Restore == "" {
				t.Errorf("row %q: restored, but how it is saved or restored is not said", a.Name)
			}
		case Refused, Gap:
			if a.Reason == "" {
				t.Errorf("row %q: %s without a reason", a.Name, a.Status)
			}
		case Derived:
			if a.Save == "" {
				t.Errorf("row %q: derived, but not from what", a.Name)
			}
		default:
			t.Errorf("row %q: unknown status %q", a.Name, a.Status)
		}
		if a.CRIU == "" && a.Status != Derived {
			t.Errorf("row %q: what CRIU does is not said", a.Name)
		}
	}
}

// TestDoc checks that docs/inventory.md is the table's rendering; with
// -update it rewrites it.
func TestDoc(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "inventory.md")
	want := Markdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/inventory -update)", err)
	}
	if string(got) != want {
		t.Errorf("%s is not the table's rendering: run go test ./pkg/inventory -update", path)
	}
}

// TestProofs checks that every fidelity case and e2e test a row names as
// its proof exists.
func TestProofs(t *testing.T) {
	fid, err := os.ReadFile(filepath.Join("..", "..", "test", "fidelity", "fidelity_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{}
	for _, m := range regexp.MustCompile(`name: "([^"]+)"`).FindAllStringSubmatch(string(fid), -1) {
		cases[m[1]] = true
	}
	var e2e strings.Builder
	files, _ := filepath.Glob(filepath.Join("..", "..", "test", "e2e", "*_test.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e2e.Write(b)
	}
	word := regexp.MustCompile(`^[a-z0-9_]+$`)
	for _, a := range All() {
		for _, part := range strings.Split(a.Case, ",") {
			part = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(part), "e2e "))
			f := strings.Fields(part)
			if len(f) == 0 {
				continue
			}
			name := f[0]
			switch {
			case strings.HasPrefix(name, "Test"):
				if !strings.Contains(e2e.String(), "func "+strings.TrimSuffix(name, "*")) {
					t.Errorf("row %q: proof %s: no such e2e test", a.Name, name)
				}
			case word.MatchString(name) && name != "every":
				if !cases[name] {
					t.Errorf("row %q: proof %s: no such fidelity case", a.Name, name)
				}
			}
		}
	}
}

package kernelcheck

import (
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProbes runs every probe on this machine (as root, where ckpt runs):
// the test machines have every feature.
func TestProbes(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Fatalf("run as root: ckpt's probes (kcmp, pidfd_getfd, TCP_REPAIR, clone3 set_tid) need it")
	}
	for _, f := range Features() {
		t.Run(f.Name, func(t *testing.T) {
			if err := f.Probe(); err != nil {
				t.Errorf("%s: %v", f.Name, err)
			}
		})
	}
}

// TestProbesCost: a probe a dump or restore runs (Check) costs
// microseconds. The bound is loose (a loaded machine); BenchmarkCheck
// gives the real numbers. The optional ones run in ckpt check only (the
// BPF readers load programs: milliseconds).
func TestProbesCost(t *testing.T) {
	for _, f := range Features() {
		if f.Need == 0 {
			continue
		}
		f.Probe() // warm (first open of /proc files, page faults)
		const n = 50
		start := time.Now()
		for i := 0; i < n; i++ {
			f.Probe()
		}
		if per := time.Since(start) / n; per > 2*time.Millisecond {
			t.Errorf("%s: %v per probe, want microseconds", f.Name, per)
		}
	}
}

// TestCheck: on this machine nothing is missing for a dump or a restore.
func TestCheck(t *testing.T) {
	for _, need := range []Need{Dump, Restore, Dump | Restore} {
		if err := Check(need); err != nil {
			t.Errorf("Check(%v): %v", need, err)
		}
	}
}

// TestNotSupportedError: a probe's error names the feature, wraps
// ErrNotSupported and keeps its cause.
func TestNotSupportedError(t *testing.T) {
	err := notSupported(FeatureClone3SetTID, unix.ENOSYS)
	if !errors.Is(err, ErrNotSupported) || !errors.Is(err, unix.ENOSYS) {
		t.Errorf("%v: want it to wrap ErrNotSupported and ENOSYS", err)
	}
	if want := "clone3 set_tid: not supported by this kernel (function not implemented)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	var nse *NotSupportedError
	if !errors.As(err, &nse) || nse.Feature != FeatureClone3SetTID {
		t.Errorf("errors.As: %v, feature %+v", err, nse)
	}
	if notSupported("x", nil) != nil {
		t.Errorf("notSupported of a nil cause is not nil")
	}
}

// TestKernelAtLeast parses kernel release strings.
func TestKernelAtLeast(t *testing.T) {
	tests := []struct {
		release      string
		major, minor int
		ok           bool
	}{
		{"6.1.0-13-amd64", 5, 13, true},
		{"5.13.0", 5, 13, true},
		{"5.12.19-gentoo", 5, 13, false},
		{"4.19.0", 5, 5, false},
		{"10.0", 5, 13, true},
		{"", 5, 13, false},
		{"garbage", 5, 13, false},
	}
	for _, tc := range tests {
		if err := kernelAtLeast(tc.release, tc.major, tc.minor); (err == nil) != tc.ok {
			t.Errorf("kernelAtLeast(%q, %d, %d): %v, want ok=%v", tc.release, tc.major, tc.minor, err, tc.ok)
		}
	}
}

// TestRun: ckpt check's results cover every feature, all fine here, with
// who needs each.
func TestRun(t *testing.T) {
	res := Run()
	if len(res) != len(Features()) {
		t.Fatalf("%d results for %d features", len(res), len(Features()))
	}
	for _, r := range res {
		if !r.OK || r.Error != "" || r.Use == "" || r.NeededBy == "" {
			t.Errorf("result %+v", r)
		}
		if r.Required == (r.NeededBy == "optional") {
			t.Errorf("%s: required %v but needed by %q", r.Name, r.Required, r.NeededBy)
		}
		if strings.Contains(r.Name, "soft-dirty") {
			t.Errorf("%s: ckpt does not use it", r.Name)
		}
	}
}

// BenchmarkCheck measures what a dump and a restore pay for their probes.
func BenchmarkCheck(b *testing.B) {
	for _, tc := range []struct {
		name string
		need Need
	}{{"dump", Dump}, {"restore", Restore}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := Check(tc.need); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProbe measures each probe.
func BenchmarkProbe(b *testing.B) {
	for _, f := range Features() {
		b.Run(f.Name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				f.Probe()
			}
		})
	}
}

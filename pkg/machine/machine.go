// Package machine identifies the machine an image is taken on and tells
// whether another one can stand in for it: the architecture, the
// instruction set extensions a program may use, the xsave features the
// kernel enables, and the kernel's vDSO, into which a restored process
// keeps calling. A dump records the identity in the image header (ReadCPU,
// HashVDSO); a restore checks it (Check, CheckXState) before it creates
// anything.
package machine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// ErrIncompatible means the image was taken on a machine this one cannot
// stand in for (CPU features, kernel vDSO, architecture).
var ErrIncompatible = errors.New("image is incompatible with this machine")

// ReadCPU describes this machine's processor from /proc/cpuinfo (its first
// processor: they all have the same features).
func ReadCPU() (image.CPU, error) {
	var c image.CPU
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return c, fmt.Errorf("read cpu: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "vendor_id":
			c.Vendor = v
		case "model name":
			c.Model = v
		case "flags":
			c.Flags = strings.Fields(v)
		}
		if c.Flags != nil {
			break
		}
	}
	return c, nil
}

// HashVDSO is how images identify a vDSO: the SHA-256 of its bytes.
func HashVDSO(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// OwnVDSO describes this process's vDSO, which is the running kernel's.
func OwnVDSO() (image.VDSO, error) {
	maps, err := proc.ReadMaps(sys.Getpid()) // not smaps: no walk of our page tables
	if err != nil {
		return image.VDSO{}, fmt.Errorf("own vdso: %w", err)
	}
	for _, m := range maps {
		if m.Path == "[vdso]" {
			b := make([]byte, m.End-m.Start)
			if err := ptrace.ReadMem(sys.Getpid(), m.Start, b); err != nil {
				return image.VDSO{}, fmt.Errorf("read own vdso: %w", err)
			}
			return image.VDSO{Size: m.End - m.Start, SHA256: HashVDSO(b)}, nil
		}
	}
	return image.VDSO{}, errors.New("own vdso: this process has no vdso")
}

// isaFlag reports /proc/cpuinfo flags that name instructions a program may
// execute: an image that used them cannot run where they are missing.
func isaFlag(f string) bool {
	for _, p := range []string{"sse", "ssse", "avx", "amx", "fma", "f16c", "bmi", "adx", "aes", "vaes", "pclmul", "vpclmul",
		"sha", "gfni", "movbe", "popcnt", "abm", "lzcnt", "rdrand", "rdseed", "xsave", "cx16", "clflushopt", "clwb",
		"erms", "fsrm", "rdpid", "pku", "ospke", "waitpkg", "movdir", "serialize", "tsxldtrk", "rtm", "hle", "lahf_lm"} {
		if strings.HasPrefix(f, p) {
			return true
		}
	}
	return false
}

// Check tells whether this machine can run an image with header h: same
// architecture, every instruction set extension the image's CPU had, and
// the same vDSO. A refusal wraps ErrIncompatible and names the difference.
func Check(h *image.Header) error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return fmt.Errorf("uname: %w", err)
	}
	if m := unix.ByteSliceToString(uts.Machine[:]); h.Machine != m {
		return fmt.Errorf("image is for %s, this machine is %s: %w", h.Machine, m, ErrIncompatible)
	}
	cpu, err := ReadCPU()
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, f := range cpu.Flags {
		have[f] = true
	}
	var missing []string
	for _, f := range h.CPU.Flags {
		if isaFlag(f) && !have[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("the image's CPU (%s) has features this one (%s) lacks: %s: %w",
			h.CPU.Model, cpu.Model, strings.Join(missing, " "), ErrIncompatible)
	}
	if h.VDSO.SHA256 != "" {
		mine, err := OwnVDSO()
		if err != nil {
			return err
		}
		if mine.SHA256 != h.VDSO.SHA256 || mine.Size != h.VDSO.Size {
			return fmt.Errorf("the image's vDSO (kernel %s, %d bytes) differs from this kernel's (%s, %d bytes); "+
				"a restored process calls into its old vDSO, so it needs the same kernel build: %w",
				h.Kernel, h.VDSO.Size, unix.ByteSliceToString(uts.Release[:]), mine.Size, ErrIncompatible)
		}
	}
	return nil
}

// CheckXState compares the image's xsave features with the kernel's, seen
// in xs, the NT_X86_XSTATE register set of a live task here.
func CheckXState(h *image.Header, xs []byte) error {
	mine := ptrace.XCR0(xs)
	if extra := h.CPU.XCR0 &^ mine; extra != 0 {
		return fmt.Errorf("the image uses xsave features %#x that this CPU does not enable (image XCR0 %#x, here %#x): %w",
			extra, h.CPU.XCR0, mine, ErrIncompatible)
	}
	if h.CPU.XSaveSize != 0 && h.CPU.XSaveSize != len(xs) {
		return fmt.Errorf("the image's xstate is %d bytes, here %d: %w", h.CPU.XSaveSize, len(xs), ErrIncompatible)
	}
	return nil
}

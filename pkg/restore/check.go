package restore

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

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

// CheckMachine tells whether this machine can run an image with header h.
func CheckMachine(h *image.Header) error { return checkMachine(h) }

func checkMachine(h *image.Header) error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return err
	}
	if m := unix.ByteSliceToString(uts.Machine[:]); h.Machine != m {
		return fmt.Errorf("image is for %s, this machine is %s: %w", h.Machine, m, ErrIncompatible)
	}
	cpu, err := dump.ReadCPU()
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
		mine, err := ownVDSO()
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

// checkXState compares the image's xsave features with the kernel's, read
// from a live task of ours.
func checkXState(h *image.Header, tid int) error {
	xs, err := ptrace.GetXState(tid)
	if err != nil {
		return err
	}
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

// ownVDSO describes this process's vDSO, which is the kernel's.
func ownVDSO() (image.VDSO, error) {
	maps, err := proc.ReadSmaps(os.Getpid())
	if err != nil {
		return image.VDSO{}, err
	}
	for _, m := range maps {
		if m.Path == "[vdso]" {
			b := make([]byte, m.End-m.Start)
			if err := ptrace.ReadMem(os.Getpid(), m.Start, b); err != nil {
				return image.VDSO{}, fmt.Errorf("read own vdso: %w", err)
			}
			return image.VDSO{Size: m.End - m.Start, SHA256: dump.HashVDSO(b)}, nil
		}
	}
	return image.VDSO{}, fmt.Errorf("this process has no vdso")
}

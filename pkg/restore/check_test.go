package restore

import (
	"errors"
	"testing"

	"github.com/ckpt/ckpt/pkg/dump"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

func thisMachine(t *testing.T) image.Header {
	t.Helper()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	cpu, err := dump.ReadCPU()
	if err != nil {
		t.Fatal(err)
	}
	v, err := ownVDSO()
	if err != nil {
		t.Fatal(err)
	}
	return image.Header{Machine: unix.ByteSliceToString(uts.Machine[:]), Kernel: "test", CPU: cpu, VDSO: v}
}

func TestCheckMachine(t *testing.T) {
	tests := []struct {
		name string
		mod  func(h *image.Header)
		ok   bool
	}{
		{"same machine", func(h *image.Header) {}, true},
		{"other architecture", func(h *image.Header) { h.Machine = "aarch64" }, false},
		{"missing ISA feature", func(h *image.Header) { h.CPU.Flags = append(h.CPU.Flags, "avx512_imaginary") }, false},
		{"extra non-ISA flag is fine", func(h *image.Header) { h.CPU.Flags = append(h.CPU.Flags, "hypervisor_imaginary") }, true},
		{"fewer features is fine", func(h *image.Header) { h.CPU.Flags = h.CPU.Flags[:1] }, true},
		{"other vDSO", func(h *image.Header) { h.VDSO.SHA256 = "00" }, false},
		{"other vDSO size", func(h *image.Header) { h.VDSO.Size += 4096 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := thisMachine(t)
			tt.mod(&h)
			err := checkMachine(&h)
			if tt.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrIncompatible) {
				t.Fatalf("got %v, want ErrIncompatible", err)
			}
		})
	}
}

func TestResumeRegs(t *testing.T) {
	neg := func(e int64) uint64 { return uint64(-e) }
	tests := []struct {
		name            string
		in              image.Regs
		wantRax, wantIP uint64
	}{
		{"not in a syscall", image.Regs{OrigRax: ^uint64(0), Rax: 5, Rip: 100}, 5, 100},
		{"read: ERESTARTSYS restarts", image.Regs{OrigRax: 0, Rax: neg(512), Rip: 100}, 0, 98},
		{"pause: ERESTARTNOHAND restarts", image.Regs{OrigRax: 34, Rax: neg(514), Rip: 100}, 34, 98},
		{"ERESTARTNOINTR restarts", image.Regs{OrigRax: 61, Rax: neg(513), Rip: 100}, 61, 98},
		{"nanosleep: restart block gives EINTR", image.Regs{OrigRax: 35, Rax: neg(516), Rip: 100}, neg(4), 100},
		{"syscall already returned", image.Regs{OrigRax: 1, Rax: 3, Rip: 100}, 3, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resumeRegs(tt.in)
			if got.Rax != tt.wantRax || got.Rip != tt.wantIP || got.OrigRax != ^uint64(0) {
				t.Fatalf("got rax %#x rip %d orig_rax %#x, want rax %#x rip %d orig_rax -1", got.Rax, got.Rip, got.OrigRax, tt.wantRax, tt.wantIP)
			}
		})
	}
}

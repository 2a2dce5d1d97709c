package machine

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// thisMachine is the header of an image taken here.
func thisMachine(t *testing.T) image.Header {
	t.Helper()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	cpu, err := ReadCPU()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpu.Flags) == 0 {
		t.Fatal("ReadCPU: no flags")
	}
	v, err := OwnVDSO()
	if err != nil {
		t.Fatal(err)
	}
	return image.Header{Machine: unix.ByteSliceToString(uts.Machine[:]), Kernel: "test", CPU: cpu, VDSO: v}
}

func TestCheck(t *testing.T) {
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
			err := Check(&h)
			if tt.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrIncompatible) {
				t.Fatalf("got %v, want ErrIncompatible", err)
			}
		})
	}
}

func TestCheckXState(t *testing.T) {
	xs := make([]byte, 2696)
	binary.LittleEndian.PutUint64(xs[464:], 0x7) // x87, SSE, AVX
	tests := []struct {
		name string
		cpu  image.CPU
		ok   bool
	}{
		{"same", image.CPU{XCR0: 0x7, XSaveSize: len(xs)}, true},
		{"fewer features", image.CPU{XCR0: 0x3, XSaveSize: len(xs)}, true},
		{"size not recorded", image.CPU{XCR0: 0x7}, true},
		{"AVX-512 missing here", image.CPU{XCR0: 0xe7, XSaveSize: len(xs)}, false},
		{"other xstate size", image.CPU{XCR0: 0x7, XSaveSize: 832}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckXState(&image.Header{CPU: tt.cpu}, xs)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrIncompatible)) {
				t.Fatalf("got %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestHashVDSO(t *testing.T) {
	if got, want := HashVDSO(nil), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"; got != want {
		t.Fatalf("HashVDSO(nil) = %s, want the SHA-256 of nothing %s", got, want)
	}
}

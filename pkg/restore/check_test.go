package restore

import (
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
)

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

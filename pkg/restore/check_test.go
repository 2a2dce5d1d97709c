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
		restart         int64
		wantRax, wantIP uint64
	}{
		{"not in a syscall", image.Regs{OrigRax: ^uint64(0), Rax: 5, Rip: 100}, 0, 5, 100},
		{"read: ERESTARTSYS restarts", image.Regs{OrigRax: 0, Rax: neg(512), Rip: 100}, 0, 0, 98},
		{"pause: ERESTARTNOHAND restarts", image.Regs{OrigRax: 34, Rax: neg(514), Rip: 100}, 0, 34, 98},
		{"ERESTARTNOINTR restarts", image.Regs{OrigRax: 61, Rax: neg(513), Rip: 100}, 0, 61, 98},
		{"nanosleep: restart block made again", image.Regs{OrigRax: 35, Rax: neg(516), Rip: 100}, 0, 35, 98},
		{"clock_nanosleep: made again", image.Regs{OrigRax: 230, Rax: neg(516), Rip: 100}, 0, 230, 98},
		{"poll: made again", image.Regs{OrigRax: 7, Rax: neg(516), Rip: 100}, 0, 7, 98},
		{"restart_syscall of a poll", image.Regs{OrigRax: 219, Rax: neg(516), Rip: 100}, 7, 7, 98},
		{"restart_syscall of an unknown call: EINTR", image.Regs{OrigRax: 219, Rax: neg(516), Rip: 100}, 0, neg(4), 100},
		{"syscall already returned", image.Regs{OrigRax: 1, Rax: 3, Rip: 100}, 0, 3, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resumeRegs(tt.in, tt.restart)
			if got.Rax != tt.wantRax || got.Rip != tt.wantIP || got.OrigRax != ^uint64(0) {
				t.Fatalf("got rax %#x rip %d orig_rax %#x, want rax %#x rip %d orig_rax -1", got.Rax, got.Rip, got.OrigRax, tt.wantRax, tt.wantIP)
			}
		})
	}
}

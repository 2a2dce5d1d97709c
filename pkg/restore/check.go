package restore

import (
	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/machine"
	"github.com/ckpt/ckpt/pkg/ptrace"
)

// checkXState compares the image's xsave features with the kernel's, read
// from a live task of ours.
func checkXState(h *image.Header, tid sys.TID) error {
	xs, err := ptrace.GetXState(tid)
	if err != nil {
		return err
	}
	return machine.CheckXState(h, xs)
}

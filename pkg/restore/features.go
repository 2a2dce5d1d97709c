package restore

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/kernelcheck"
	"golang.org/x/sys/unix"
)

// checkImageFeatures probes the kernel features this image needs beyond
// what every restore needs (kernelcheck.Restore): TCP_REPAIR for a
// TCP connection. A missing one is named with the first
// process and connection that needs it, before anything is built.
func checkImageFeatures(img *imageMeta) error {
	for _, p := range img.procs {
		for _, f := range p.Files {
			s := f.Socket
			if s == nil || s.Family == unix.AF_UNIX || s.Type != unix.SOCK_STREAM || s.TCP == nil {
				continue
			}
			if err := kernelcheck.TCPRepair(); err != nil {
				return fmt.Errorf("restore %d: TCP connection %s -> %s: %w", p.PID, s.Local, s.Remote, err)
			}
			return nil
		}
	}
	return nil
}

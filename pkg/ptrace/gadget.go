package ptrace

import (
	"bytes"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
)

// Area is a range of a tracee's address space.
type Area struct{ Start, End uint64 }

// FindSyscall returns the address of the first `syscall` instruction bytes
// (0f 05) in the areas of process pid, tried in order; run there with
// Injector.Step. It reads in chunks and stops at the first match. ok is
// false if no area holds one.
func FindSyscall(pid sys.PID, areas []Area) (addr uint64, ok bool, err error) {
	const chunk = 64 << 10
	buf := make([]byte, chunk+1)
	for _, a := range areas {
		for at := a.Start; at < a.End; at += chunk {
			n := min(uint64(chunk+1), a.End-at) // one byte more: a match across chunks
			if err := ReadMem(pid, at, buf[:n]); err != nil {
				return 0, false, fmt.Errorf("read %#x-%#x: %w", at, at+n, err)
			}
			if i := bytes.Index(buf[:n], []byte{0x0f, 0x05}); i >= 0 {
				return at + uint64(i), true, nil
			}
		}
	}
	return 0, false, nil
}

package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GetRobustList returns the robust futex list head of thread tid and the
// size of that head (get_robust_list(2); x/sys/unix has no wrapper).
func GetRobustList(tid TID) (head, size uint64, err error) {
	_, _, e := unix.Syscall(unix.SYS_GET_ROBUST_LIST, uintptr(tid), uintptr(unsafe.Pointer(&head)), uintptr(unsafe.Pointer(&size)))
	if e != 0 {
		return 0, 0, os.NewSyscallError("get_robust_list", e)
	}
	return head, size, nil
}

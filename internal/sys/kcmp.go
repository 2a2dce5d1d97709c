package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KcmpType is the type argument of kcmp(2) (enum kcmp_type in
// linux/kcmp.h; x/sys/unix does not define it).
type KcmpType int

// The kcmp types ckpt uses.
const (
	KcmpFile     KcmpType = 0 // KCMP_FILE: two fds, one open file description?
	KcmpEpollTFD KcmpType = 7 // KCMP_EPOLL_TFD: the file an epoll item watches
)

// kcmp calls kcmp(2); 0 means equal.
func kcmp(pid1, pid2 PID, typ KcmpType, idx1, idx2 uintptr) (uintptr, error) {
	r, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(pid1), uintptr(pid2), uintptr(typ), idx1, idx2, 0)
	if e != 0 {
		return 0, os.NewSyscallError("kcmp", e)
	}
	return r, nil
}

// SameFile reports whether fd1 of pid1 and fd2 of pid2 refer to one open
// file description (kcmp KCMP_FILE).
func SameFile(pid1 PID, fd1 TargetFD, pid2 PID, fd2 TargetFD) (bool, error) {
	r, err := kcmp(pid1, pid2, KcmpFile, uintptr(fd1), uintptr(fd2))
	return err == nil && r == 0, err
}

// CompareFiles orders the open file descriptions of fd1 of pid1 and fd2
// of pid2 as kcmp KCMP_FILE does: 0 the same, -1 the first before, 1
// after (an order the kernel keeps while both exist, to sort them by).
func CompareFiles(pid1 PID, fd1 TargetFD, pid2 PID, fd2 TargetFD) (int, error) {
	r, err := kcmp(pid1, pid2, KcmpFile, uintptr(fd1), uintptr(fd2))
	switch {
	case err != nil:
		return 0, err
	case r == 1:
		return -1, nil
	case r == 2:
		return 1, nil
	case r == 0:
		return 0, nil
	}
	return 0, os.NewSyscallError("kcmp", unix.EINVAL)
}

// epollSlot is struct kcmp_epoll_slot.
type epollSlot struct{ efd, tfd, toff uint32 }

// EpollWatches reports whether the item that epoll fd epfd of pid
// registered under fd number tfd watches the file that pid's fd candidate
// refers to (kcmp KCMP_EPOLL_TFD). A missing item is ENOENT.
func EpollWatches(pid PID, epfd, tfd, candidate TargetFD) (bool, error) {
	return EpollWatchesAt(pid, epfd, tfd, 0, candidate)
}

// EpollWatchesAt is EpollWatches for the toff-th item registered under
// tfd (one fd number can key several items: a closed fd's item stays
// while its file lives, and the number can be reused and registered
// again). Items are counted in the set's order, which is fdinfo's.
func EpollWatchesAt(pid PID, epfd, tfd TargetFD, toff int, candidate TargetFD) (bool, error) {
	slot := epollSlot{efd: uint32(epfd), tfd: uint32(tfd), toff: uint32(toff)}
	// The pointer is converted in the call expression (see ptrace's
	// ptracePtr): a uintptr passed through kcmp would not follow a stack
	// that moves.
	r, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(pid), uintptr(pid), uintptr(KcmpEpollTFD), uintptr(candidate), uintptr(unsafe.Pointer(&slot)), 0)
	if e != 0 {
		return false, os.NewSyscallError("kcmp", e)
	}
	return r == 0, nil
}

// KcmpVM is KCMP_VM: two processes with one address space.
const KcmpVM KcmpType = 1

// SameVM reports whether pid1 and pid2 share their memory (threads of one
// process, a vfork() child before exec or exit, clone(CLONE_VM)).
func SameVM(pid1, pid2 PID) (bool, error) {
	r, err := kcmp(pid1, pid2, KcmpVM, 0, 0)
	return err == nil && r == 0, err
}

// KcmpFiles is KCMP_FILES: two processes with one file descriptor table.
const KcmpFiles KcmpType = 2

// SameFiles reports whether pid1 and pid2 share their file descriptor
// table (threads of one process, clone(CLONE_FILES) between processes).
func SameFiles(pid1, pid2 PID) (bool, error) {
	r, err := kcmp(pid1, pid2, KcmpFiles, 0, 0)
	return err == nil && r == 0, err
}

// KcmpSysVSem is KCMP_SYSVSEM: two processes with one list of System V
// semaphore undo operations.
const KcmpSysVSem KcmpType = 6

// SameSemUndo reports whether pid1 and pid2 have one list of System V
// semaphore undo operations (kcmp KCMP_SYSVSEM); two processes with none
// compare equal.
func SameSemUndo(pid1, pid2 PID) (bool, error) {
	r, err := kcmp(pid1, pid2, KcmpSysVSem, 0, 0)
	return err == nil && r == 0, err
}

package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// semGetPID is semctl's GETPID command.
const semGetPID = 11

// SemGetPID returns the PID of the last process that operated on
// semaphore num of System V semaphore set id (semctl GETPID; x/sys/unix
// has no semctl).
func SemGetPID(id, num int) (PID, error) {
	r, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), uintptr(num), semGetPID, 0, 0, 0)
	if e != 0 {
		return 0, os.NewSyscallError("semctl GETPID", e)
	}
	return PID(r), nil
}

// SemidDS is struct semid64_ds of x86-64 (semctl IPC_STAT).
type SemidDS struct {
	Perm  unix.SysvIpcPerm
	OTime int64 // last semop
	_     uint64
	CTime int64 // creation or last change
	_     uint64
	NSems uint64
	_     [2]uint64
}

// semGetAll is semctl's GETALL command.
const semGetAll = 13

// SemStat returns the state of semaphore set id (semctl IPC_STAT).
func SemStat(id int) (*SemidDS, error) {
	var ds SemidDS
	if _, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_STAT, uintptr(unsafe.Pointer(&ds)), 0, 0); e != 0 {
		return nil, os.NewSyscallError("semctl IPC_STAT", e)
	}
	return &ds, nil
}

// SemGetAll returns the values of the n semaphores of set id (semctl
// GETALL).
func SemGetAll(id, n int) ([]uint16, error) {
	vals := make([]uint16, max(n, 1))
	if _, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, semGetAll, uintptr(unsafe.Pointer(&vals[0])), 0, 0); e != 0 {
		return nil, os.NewSyscallError("semctl GETALL", e)
	}
	return vals[:n], nil
}

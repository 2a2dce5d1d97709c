package sys

import (
	"encoding/binary"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MsqidDS is struct msqid64_ds of x86_64: a System V message queue as
// msgctl(IPC_STAT) shows it.
type MsqidDS struct {
	Perm   unix.SysvIpcPerm
	STime  int64 // last msgsnd
	RTime  int64 // last msgrcv
	CTime  int64 // creation or last IPC_SET
	CBytes uint64
	QNum   uint64
	QBytes uint64
	LSPID  int32 // last msgsnd
	LRPID  int32 // last msgrcv
	_      [2]uint64
}

// MsgCopy is msgrcv's MSG_COPY: the message at an index is copied out and
// left in the queue.
const MsgCopy = 0o40000

// MsgStat returns the state of message queue id (msgctl IPC_STAT).
func MsgStat(id int) (*MsqidDS, error) {
	var ds MsqidDS
	if _, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_STAT, uintptr(unsafe.Pointer(&ds))); e != 0 {
		return nil, os.NewSyscallError("msgctl IPC_STAT", e)
	}
	return &ds, nil
}

// MsgSet sets the owner, mode and byte limit of message queue id from ds
// (msgctl IPC_SET).
func MsgSet(id int, ds *MsqidDS) error {
	if _, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_SET, uintptr(unsafe.Pointer(ds))); e != 0 {
		return os.NewSyscallError("msgctl IPC_SET", e)
	}
	return nil
}

// MsgRemove removes message queue id (msgctl IPC_RMID).
func MsgRemove(id int) error {
	if _, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0); e != 0 {
		return os.NewSyscallError("msgctl IPC_RMID", e)
	}
	return nil
}

// MsgGet is msgget(key, flags).
func MsgGet(key int32, flags int) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(key), uintptr(flags), 0)
	if e != 0 {
		return -1, os.NewSyscallError("msgget", e)
	}
	return int(r), nil
}

// MsgPeek copies the message at index of queue id without taking it
// (msgrcv with MSG_COPY|IPC_NOWAIT); max is the largest text it can hold.
func MsgPeek(id, index, max int) (typ int64, text []byte, err error) {
	buf := make([]byte, 8+max)
	n, _, e := unix.Syscall6(unix.SYS_MSGRCV, uintptr(id), uintptr(unsafe.Pointer(&buf[0])), uintptr(max),
		uintptr(index), MsgCopy|unix.IPC_NOWAIT, 0)
	if e != 0 {
		return 0, nil, os.NewSyscallError("msgrcv MSG_COPY", e)
	}
	return int64(binary.LittleEndian.Uint64(buf)), buf[8 : 8+n], nil
}

// MsgSend sends a message of type typ (> 0) to queue id (msgsnd with
// flags, e.g. IPC_NOWAIT).
func MsgSend(id int, typ int64, text []byte, flags int) error {
	buf := make([]byte, 8+len(text))
	binary.LittleEndian.PutUint64(buf, uint64(typ))
	copy(buf[8:], text)
	if _, _, e := unix.Syscall6(unix.SYS_MSGSND, uintptr(id), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(text)), uintptr(flags), 0, 0); e != 0 {
		return os.NewSyscallError("msgsnd", e)
	}
	return nil
}

package sys

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tfdIocSetTicks is TFD_IOC_SET_TICKS (_IOW('T', 0, u64), linux/timerfd.h);
// x/sys/unix does not define it.
const tfdIocSetTicks = 0x40085400

// TimerfdSetTicks sets the number of unread expirations of a timerfd
// (needs CONFIG_CHECKPOINT_RESTORE).
func TimerfdSetTicks(fd *FD, ticks uint64) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd.Uintptr(), tfdIocSetTicks, uintptr(unsafe.Pointer(&ticks)))
	if e != 0 {
		return os.NewSyscallError("ioctl(TFD_IOC_SET_TICKS)", e)
	}
	return nil
}

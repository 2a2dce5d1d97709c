// Package kernelcheck tells whether the running kernel has the features
// ckpt relies on, like `criu check`. Each check exercises the feature on
// ckpt's own process where it can, rather than trusting version numbers.
package kernelcheck

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// Result is the outcome of one check.
type Result struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"` // ckpt cannot work without it
	Detail   string `json:"detail"`
}

type check struct {
	name     string
	required bool
	run      func() (string, error)
}

var checks = []check{
	{"proc map_files", true, func() (string, error) {
		_, err := os.ReadDir("/proc/self/map_files")
		return "mapped files reachable through /proc/PID/map_files", err
	}},
	{"kcmp", true, func() (string, error) {
		me := sys.PID(os.Getpid())
		if _, err := sys.SameFile(me, 0, me, 0); err != nil {
			return "", err
		}
		return "shared open files detected with kcmp(KCMP_FILE)", nil
	}},
	{"clone3 set_tid", true, func() (string, error) {
		if _, err := os.Stat("/proc/sys/kernel/ns_last_pid"); err != nil {
			return "", fmt.Errorf("no ns_last_pid: kernel built without CONFIG_CHECKPOINT_RESTORE")
		}
		return "processes get their old PIDs back", kernelAtLeast(5, 5)
	}},
	{"PR_SET_MM_MAP", true, func() (string, error) {
		var size uint32
		if err := unix.Prctl(unix.PR_SET_MM, unix.PR_SET_MM_MAP_SIZE, uintptr(unsafe.Pointer(&size)), 0, 0); err != nil {
			return "", err
		}
		if size != 104 {
			return "", fmt.Errorf("prctl_mm_map is %d bytes, ckpt knows 104", size)
		}
		return "mm fields, auxv and exe link restorable", nil
	}},
	{"process_vm_readv", true, func() (string, error) {
		var src, dst [8]byte
		src[0] = 42
		l := []unix.Iovec{{Base: &dst[0], Len: 8}}
		r := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 8}}
		if _, err := unix.ProcessVMReadv(os.Getpid(), l, r, 0); err != nil {
			return "", err
		}
		if dst[0] != 42 {
			return "", fmt.Errorf("read the wrong bytes")
		}
		return "memory moved in batches", nil
	}},
	{"pagemap", true, func() (string, error) {
		f, err := os.Open("/proc/self/pagemap")
		if err != nil {
			return "", err
		}
		defer f.Close()
		var b [8]byte
		_, err = f.ReadAt(b[:], int64(uintptr(unsafe.Pointer(&b[0]))/4096*8))
		return "present pages found without reading them", err
	}},
	{"ptrace rseq configuration", true, func() (string, error) {
		return "rseq registrations dumped", kernelAtLeast(5, 13)
	}},
	{"memfd_create", true, func() (string, error) {
		fd, err := unix.MemfdCreate("ckpt-check", unix.MFD_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		return "restore helper runs from memory", err
	}},
	{"userfaultfd", false, func() (string, error) {
		fd, err := sys.Userfaultfd(unix.O_CLOEXEC)
		if err != nil {
			return "", err
		}
		fd.Close()
		return "restored memory filled with UFFDIO_COPY (faster than process_vm_writev)", nil
	}},
	{"TCP_REPAIR", false, func() (string, error) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, 1); err != nil {
			return "", err
		}
		return "TCP connections can be checkpointed", nil
	}},
	{"sock_diag", false, func() (string, error) {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		if err != nil {
			return "", err
		}
		unix.Close(fd)
		return "sockets listed through netlink", nil
	}},
}

func kernelAtLeast(major, minor int) error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return err
	}
	var ma, mi int
	fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &ma, &mi)
	if ma > major || (ma == major && mi >= minor) {
		return nil
	}
	return fmt.Errorf("kernel %d.%d, need %d.%d", ma, mi, major, minor)
}

// Run runs every check.
func Run() []Result {
	out := make([]Result, 0, len(checks))
	for _, c := range checks {
		detail, err := c.run()
		r := Result{Name: c.name, Required: c.required, OK: err == nil, Detail: detail}
		if err != nil {
			r.Detail = err.Error()
		}
		out = append(out, r)
	}
	return out
}

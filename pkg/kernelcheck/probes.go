package kernelcheck

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// Feature names, as errors and ckpt check give them.
const (
	FeatureMapFiles       = "proc map_files"
	FeatureKcmp           = "kcmp"
	FeatureProcessVMReadv = "process_vm_readv"
	FeaturePagemap        = "pagemap"
	FeaturePtraceRseq     = "ptrace rseq configuration"
	FeatureClone3SetTID   = "clone3 set_tid"
	FeaturePRSetMMMap     = "PR_SET_MM_MAP"
	FeatureMemfdCreate    = "memfd_create"
	FeatureUserfaultfd    = "userfaultfd"
	FeaturePidfdGetfd     = "pidfd_getfd"
	FeatureTCPRepair      = "TCP_REPAIR"
	FeatureSockDiag       = "sock_diag"
)

// MapFiles probes /proc/PID/map_files: the link of a page of a memfd
// mapped for the probe must be readable there (listing the directory
// would cost a line per mapping of ckpt).
func MapFiles() error {
	return notSupported(FeatureMapFiles, func() error {
		fd, err := sys.MemfdCreate("ckpt-check", unix.MFD_CLOEXEC)
		if err != nil {
			return err
		}
		defer fd.Close()
		page := os.Getpagesize()
		if err := unix.Ftruncate(fd.Int(), int64(page)); err != nil {
			return fmt.Errorf("ftruncate: %w", err)
		}
		m, err := unix.Mmap(fd.Int(), 0, page, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("mmap: %w", err)
		}
		defer unix.Munmap(m)
		start := uintptr(unsafe.Pointer(&m[0]))
		_, err = os.Readlink(fmt.Sprintf("/proc/self/map_files/%x-%x", start, start+uintptr(page)))
		return err
	}())
}

// Kcmp probes kcmp(KCMP_FILE): the two ends of a fresh pipe are different
// files, and each is the same as itself.
func Kcmp() error {
	return notSupported(FeatureKcmp, func() error {
		r, w, err := sys.Pipe2(unix.O_CLOEXEC)
		if err != nil {
			return err
		}
		defer r.Close()
		defer w.Close()
		me := sys.Getpid()
		same, err := sys.SameFile(me, sys.TargetFD(r.Int()), me, sys.TargetFD(r.Int()))
		if err != nil {
			return err
		}
		differ, err := sys.SameFile(me, sys.TargetFD(r.Int()), me, sys.TargetFD(w.Int()))
		if err != nil {
			return err
		}
		if !same || differ {
			return errors.New("kcmp(KCMP_FILE) gives wrong answers")
		}
		return nil
	}())
}

// ProcessVMReadv probes process_vm_readv on ckpt's own memory.
func ProcessVMReadv() error {
	var dst [8]byte
	src := new([8]byte) // on the heap, which does not move: its address goes as a number
	src[0] = 42
	l := []unix.Iovec{{Base: &dst[0], Len: 8}}
	r := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 8}}
	_, err := unix.ProcessVMReadv(os.Getpid(), l, r, 0)
	runtime.KeepAlive(src)
	if err == nil && dst[0] != 42 {
		err = errors.New("read the wrong bytes")
	}
	return notSupported(FeatureProcessVMReadv, err)
}

// Pagemap probes /proc/PID/pagemap: the entry of a page of ckpt's stack
// says present.
func Pagemap() error {
	return notSupported(FeaturePagemap, func() error {
		f, err := os.Open("/proc/self/pagemap")
		if err != nil {
			return err
		}
		defer f.Close()
		var b [8]byte
		b[7] = 1 // touched: the page is present
		if _, err := f.ReadAt(b[:], int64(uintptr(unsafe.Pointer(&b[0]))/uintptr(os.Getpagesize())*8)); err != nil {
			return err
		}
		if b[7]&0x80 == 0 { // bit 63: present
			return errors.New("a present page reads as not present")
		}
		return nil
	}())
}

// PtraceRseq probes PTRACE_GET_RSEQ_CONFIGURATION (Linux 5.13) by the
// kernel version: it needs a stopped tracee to be called.
func PtraceRseq() error {
	return notSupported(FeaturePtraceRseq, kernelAtLeast(unameRelease(), 5, 13))
}

// Clone3SetTID probes clone3 with set_tid (Linux 5.5) without creating a
// process (see sys.Clone3SetTIDProbe).
func Clone3SetTID() error {
	return notSupported(FeatureClone3SetTID, sys.Clone3SetTIDProbe())
}

// PRSetMMMap probes prctl(PR_SET_MM, PR_SET_MM_MAP_SIZE): the struct
// prctl_mm_map must be the size ckpt knows.
func PRSetMMMap() error {
	// On the heap (which does not move), kept alive over the call: the
	// pointer reaches prctl as a uintptr.
	size := new(uint32)
	err := unix.Prctl(unix.PR_SET_MM, unix.PR_SET_MM_MAP_SIZE, uintptr(unsafe.Pointer(size)), 0, 0)
	runtime.KeepAlive(size)
	if err == nil && *size != 104 {
		err = fmt.Errorf("prctl_mm_map is %d bytes, ckpt knows 104", *size)
	}
	return notSupported(FeaturePRSetMMMap, err)
}

// MemfdCreate probes memfd_create.
func MemfdCreate() error {
	fd, err := sys.MemfdCreate("ckpt-check", unix.MFD_CLOEXEC)
	fd.Close()
	return notSupported(FeatureMemfdCreate, err)
}

// Userfaultfd probes userfaultfd(2) in user-mode-only mode, as restore
// opens it.
func Userfaultfd() error {
	fd, err := sys.Userfaultfd(unix.O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */)
	if err == nil {
		fd.Close()
	}
	return notSupported(FeatureUserfaultfd, err)
}

// PidfdGetfd probes pidfd_open and pidfd_getfd on ckpt itself.
func PidfdGetfd() error {
	return notSupported(FeaturePidfdGetfd, func() error {
		pidfd, err := sys.PidfdOpen(sys.Getpid(), 0)
		if err != nil {
			return err
		}
		defer pidfd.Close()
		fd, err := sys.PidfdGetfd(pidfd, 0)
		if err != nil {
			return err
		}
		return fd.Close()
	}())
}

// TCPRepair probes setsockopt(TCP_REPAIR) on a fresh TCP socket.
func TCPRepair() error {
	return notSupported(FeatureTCPRepair, func() error {
		fd, err := sys.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer fd.Close()
		return unix.SetsockoptInt(fd.Int(), unix.IPPROTO_TCP, unix.TCP_REPAIR, 1)
	}())
}

// SockDiag probes a NETLINK_SOCK_DIAG socket.
func SockDiag() error {
	fd, err := sys.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	fd.Close()
	return notSupported(FeatureSockDiag, err)
}

// unameRelease returns the kernel release (uname -r), "" if unknown.
func unameRelease() string {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return ""
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// kernelAtLeast says whether release ("6.1.0-13-amd64") is major.minor or
// later.
func kernelAtLeast(release string, major, minor int) error {
	var ma, mi int
	if n, _ := fmt.Sscanf(release, "%d.%d", &ma, &mi); n != 2 {
		return fmt.Errorf("kernel release %q: no version", release)
	}
	if ma > major || (ma == major && mi >= minor) {
		return nil
	}
	return fmt.Errorf("kernel %d.%d, need %d.%d", ma, mi, major, minor)
}

package restore

import (
	"errors"
	"fmt"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// pageFiller fills the fresh private anonymous memory of a process being
// built with UFFDIO_COPY instead of process_vm_writev: the kernel
// allocates each page and copies into it, without zeroing it first and
// without a page fault per page — a good part of a restore's cost into
// fresh memory. The userfaultfd is created in the process (injected
// userfaultfd(2)), taken with pidfd_getfd and closed there; closing ours
// once the pages are in drops every registration, before the process
// runs. It is opened in user-mode-only mode: an access from the kernel to a
// registered page that is still missing fails with EFAULT instead of
// waiting for a fault handler that does not exist.
type pageFiller struct {
	fd         *sys.FD
	registered map[*image.VMA]bool // VMAs whose pages go in with UFFDIO_COPY
}

// openFiller sets a filler up for b's private anonymous VMAs. It returns
// nil (and b falls back to process_vm_writev everywhere) if this kernel or
// process does not allow it.
func (b *builder) openFiller() *pageFiller {
	ret, err := b.in.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|sys.UffdUserModeOnly)
	if err != nil || ptrace.Errno(ret) != nil {
		return nil
	}
	theirs := ret
	defer b.call("close userfaultfd", unix.SYS_CLOSE, theirs)
	pidfd, err := sys.PidfdOpen(b.target, 0)
	if err != nil {
		return nil
	}
	defer pidfd.Close()
	fd, err := sys.PidfdGetfd(pidfd, sys.TargetFD(theirs))
	if err != nil {
		return nil
	}
	f := &pageFiller{fd: fd, registered: map[*image.VMA]bool{}}
	if _, err := sys.UffdioAPI(f.fd, 0); err != nil {
		f.close()
		return nil
	}
	for i := range b.p.VMAs {
		v := &b.p.VMAs[i]
		switch v.Kind {
		case image.VMAAnon, image.VMAHeap, image.VMAStack:
		default:
			continue
		}
		if v.Shared || v.Pages == 0 || v.HugePageSize != 0 {
			// hugetlb memory takes UFFDIO_COPY only in whole huge
			// pages: it is written with process_vm_writev.
			continue
		}
		if _, err := sys.UffdioRegister(f.fd, v.Start, v.Len(), sys.UffdioRegisterModeMissing); err == nil {
			f.registered[v] = true
		}
	}
	return f
}

// covers tells whether v's pages go in through the filler.
func (f *pageFiller) covers(v *image.VMA) bool {
	return f != nil && f.registered[v]
}

// copy puts src at addr. A page that is already there (EEXIST: the stack
// page the process had, say) is written with process_vm_writev instead,
// which needs no fault for a present page.
func (f *pageFiller) copy(pid sys.PID, addr uint64, src []byte) error {
	for len(src) > 0 {
		n, err := sys.UffdioCopy(f.fd, addr, src, 0)
		addr, src = addr+uint64(n), src[n:]
		switch {
		case err == nil && n > 0:
			continue
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EEXIST):
			page := src[:image.PageSize]
			local := []unix.Iovec{{Base: &page[0]}}
			local[0].SetLen(len(page))
			remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(page)}}
			if _, err := unix.ProcessVMWritev(int(pid), local, remote, 0); err != nil {
				return fmt.Errorf("write present page %#x: %w", addr, err)
			}
			addr, src = addr+image.PageSize, src[image.PageSize:]
		case err != nil:
			return fmt.Errorf("at %#x: %w", addr, err)
		default:
			return fmt.Errorf("UFFDIO_COPY at %#x copied nothing", addr)
		}
	}
	return nil
}

// close drops every registration.
func (f *pageFiller) close() {
	if f != nil {
		f.fd.Close()
	}
}

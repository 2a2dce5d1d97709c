package restore

import (
	"encoding/binary"
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/ptrace"
	"golang.org/x/sys/unix"
)

// An AIO context is a kernel object the process names by the address of
// its ring. It is made again with io_setup, asking for the number of
// events that gives a ring of the same size (the kernel doubles the
// request, adds two and rounds up to whole pages); its kernel-side tail,
// which no call sets, is brought to the dumped tail by submitting and
// reaping that many zero-byte reads of /dev/null; the completions not yet
// reaped and the head are written back into the ring; and the ring is
// moved to its old address with mremap, which moves the context's name
// with it.

const (
	aioRingHeader = 32 // sizeof(struct aio_ring)
	aioEventSize  = 32 // sizeof(struct io_event)
	iocbSize      = 64 // sizeof(struct iocb)
	// aioBatch bounds the reads submitted at once: their iocbs, pointers
	// and events must fit in the scratch memory.
	aioBatch = (scratchLimit - scratchOff) / (iocbSize + 8 + aioEventSize)
)

// aioRings makes the AIO contexts of the image again, in address order.
func (b *builder) aioRings(vs []*image.VMA) error {
	for _, v := range vs {
		if err := b.aioRing(v); err != nil {
			return fmt.Errorf("AIO context %#x: %w", v.Start, err)
		}
	}
	return nil
}

func (b *builder) aioRing(v *image.VMA) error {
	r := v.AIO
	if err := b.write(scratchOff, make([]byte, 8)); err != nil {
		return err
	}
	if _, err := b.call("io_setup", unix.SYS_IO_SETUP, uint64(r.Nr-2)/2, b.gadget+scratchOff); err != nil {
		return err
	}
	var hdr [aioRingHeader]byte
	if err := ptrace.ReadMem(b.target, b.gadget+scratchOff, hdr[:8]); err != nil {
		return err
	}
	ctx := binary.LittleEndian.Uint64(hdr[:8])
	if err := ptrace.ReadMem(b.target, ctx, hdr[:]); err != nil {
		return fmt.Errorf("read the new ring: %w", err)
	}
	if nr := binary.LittleEndian.Uint32(hdr[4:]); nr != r.Nr {
		return fmt.Errorf("io_setup made a ring of %d events, the image's has %d (the kernel sizes rings by the CPU count): %w", nr, r.Nr, ErrIncompatible)
	}
	if err := b.aioAdvance(ctx, r.Tail); err != nil {
		return err
	}
	if len(r.Events) > 0 {
		// The unreaped completions, in their slots from the head on.
		for i := 0; i < len(r.Events)/aioEventSize; i++ {
			slot := (uint64(r.Head) + uint64(i)) % uint64(r.Nr)
			ev := r.Events[i*aioEventSize : (i+1)*aioEventSize]
			if err := ptrace.WriteMem(b.target, ctx+aioRingHeader+slot*aioEventSize, ev); err != nil {
				return fmt.Errorf("write completion %d: %w", i, err)
			}
		}
	}
	if err := ptrace.WriteMem(b.target, ctx+8, binary.LittleEndian.AppendUint32(nil, r.Head)); err != nil {
		return fmt.Errorf("write the head: %w", err)
	}
	ret, err := b.call("mremap AIO ring", unix.SYS_MREMAP, ctx, v.Len(), v.Len(), unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, v.Start)
	if err != nil {
		return err
	}
	if ret != v.Start {
		return fmt.Errorf("the ring moved to %#x, not %#x", ret, v.Start)
	}
	return nil
}

// aioAdvance brings the kernel's tail of the fresh context ctx to tail:
// it submits that many zero-byte reads of /dev/null, which complete at
// once, and reaps them, in batches.
func (b *builder) aioAdvance(ctx uint64, tail uint32) error {
	if tail == 0 {
		return nil
	}
	if err := b.writeString(scratchPathOff, "/dev/null"); err != nil {
		return err
	}
	fd, err := b.call("open /dev/null", unix.SYS_OPENAT, uint64(unix.AT_FDCWD&0xffffffffffffffff), b.gadget+scratchPathOff, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer b.call("close /dev/null", unix.SYS_CLOSE, fd)
	cbs, ptrs := b.gadget+scratchOff, b.gadget+scratchOff+aioBatch*iocbSize
	events := ptrs + aioBatch*8
	for left := uint64(tail); left > 0; {
		n := min(left, aioBatch)
		buf := make([]byte, n*(iocbSize+8))
		for i := uint64(0); i < n; i++ {
			cb := buf[i*iocbSize:]
			// struct iocb: aio_lio_opcode IOCB_CMD_PREAD (0) at 16,
			// aio_fildes at 20, aio_buf at 24, aio_nbytes 0 at 32.
			binary.LittleEndian.PutUint32(cb[20:], uint32(fd))
			binary.LittleEndian.PutUint64(cb[24:], events)
			binary.LittleEndian.PutUint64(buf[n*iocbSize+i*8:], cbs+i*iocbSize)
		}
		if err := b.write(scratchOff, buf); err != nil {
			return err
		}
		got, err := b.call("io_submit", unix.SYS_IO_SUBMIT, ctx, n, cbs+n*iocbSize)
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("io_submit took %d of %d reads", got, n)
		}
		if got, err = b.call("io_getevents", unix.SYS_IO_GETEVENTS, ctx, n, n, events, 0); err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("io_getevents reaped %d of %d reads", got, n)
		}
		left -= n
	}
	return nil
}

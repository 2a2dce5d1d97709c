/*
 * proc_aio: AIO contexts (io_setup) come back at the same address, with
 * the same ring size, head and tail, and the completions not yet reaped.
 *
 * Context A (io_setup 64): nr+2 writes to /dev/null, every other one
 * reaped (the oldest goes), so that head and tail have wrapped round the ring and
 * some completions wait; then a read of /dev/zero (data 42) completes
 * unreaped. Context B (io_setup 1) is left empty. After the restore every
 * waiting completion is reaped in order (the read last, with its data and
 * result), the next submission lands at the old tail + 1, and B works.
 */
#include "fidelity.h"
#include <linux/aio_abi.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>

struct aio_ring {
	unsigned id, nr, head, tail, magic, compat, incompat, header_length;
	struct io_event events[];
};

static char buf[64];

static long submit(aio_context_t ctx, int fd, int op, uint64_t data)
{
	struct iocb cb = {0}, *cbs[1] = {&cb};
	cb.aio_lio_opcode = op;
	cb.aio_fildes = fd;
	cb.aio_buf = (uint64_t)(uintptr_t)buf;
	cb.aio_nbytes = sizeof buf;
	cb.aio_data = data;
	return syscall(SYS_io_submit, ctx, 1, cbs);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	aio_context_t a = 0, b = 0;
	FID_SETUP(syscall(SYS_io_setup, 64, &a) == 0, "io_setup 64");
	FID_SETUP(syscall(SYS_io_setup, 1, &b) == 0, "io_setup 1");
	int null = open("/dev/null", O_WRONLY), zero = open("/dev/zero", O_RDONLY);
	FID_SETUP(null >= 0 && zero >= 0, "open /dev/null, /dev/zero");
	volatile struct aio_ring *ring = (struct aio_ring *)a;
	unsigned nr = ring->nr;
	struct io_event ev[512];
	for (unsigned i = 0; i < nr + 2; i++) {
		FID_SETUP(submit(a, null, IOCB_CMD_PWRITE, i) == 1, "io_submit %u", i);
		if (i % 2)
			FID_SETUP(syscall(SYS_io_getevents, a, 1, 1, ev, NULL) == 1, "io_getevents %u", i);
	}
	FID_SETUP(submit(a, zero, IOCB_CMD_PREAD, 42) == 1, "io_submit read");
	unsigned head = ring->head, tail = ring->tail, waiting = (tail + nr - head) % nr;
	FID_SETUP(waiting > 2 && tail < head, "head %u tail %u: want wrapped, completions waiting", head, tail);
	fid_ready();
	fid_wait();
	ring = (struct aio_ring *)a; /* the same address */
	FID_EXPECT(ring->nr == nr && ring->head == head && ring->tail == tail, "ring nr %u head %u tail %u, want %u %u %u", ring->nr,
		   ring->head, ring->tail, nr, head, tail);
	struct timespec ts = {5, 0};
	long n = syscall(SYS_io_getevents, a, waiting, 512, ev, &ts);
	FID_EXPECT(n == (long)waiting, "io_getevents gives %ld completions, want %u", n, waiting);
	if (n == (long)waiting) {
		for (long i = 0; i + 1 < n; i++)
			FID_EXPECT(ev[i].res == sizeof buf && (i == 0 || ev[i].data == ev[i - 1].data + 1), "completion %ld: data %llu res %lld",
				   i, (unsigned long long)ev[i].data, (long long)ev[i].res);
		FID_EXPECT(ev[n - 1].data == 42 && ev[n - 1].res == sizeof buf, "last completion data %llu res %lld, want the read",
			   (unsigned long long)ev[n - 1].data, (long long)ev[n - 1].res);
	}
	FID_EXPECT(submit(a, zero, IOCB_CMD_PREAD, 43) == 1, "io_submit after: %s", strerror(errno));
	FID_EXPECT(syscall(SYS_io_getevents, a, 1, 1, ev, &ts) == 1 && ev[0].data == 43, "the read after the restore");
	FID_EXPECT(ring->tail == (tail + 1) % nr, "tail %u after one more, want %u", ring->tail, (tail + 1) % nr);
	FID_EXPECT(submit(b, zero, IOCB_CMD_PREAD, 7) == 1 && syscall(SYS_io_getevents, b, 1, 1, ev, &ts) == 1 && ev[0].data == 7,
		   "context B: %s", strerror(errno));
	return fid_done();
}

/*
 * proc_aio: an AIO context (io_setup) with a completed read not yet
 * reaped. ckpt refuses it at dump ("AIO context"); untouched, the program
 * reaps the completion and submits another read.
 */
#include "fidelity.h"
#include <linux/aio_abi.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>

static aio_context_t ctx;
static char buf[64];

static long submit_read(int fd)
{
	struct iocb cb = {0}, *cbs[1] = {&cb};
	cb.aio_lio_opcode = IOCB_CMD_PREAD;
	cb.aio_fildes = fd;
	cb.aio_buf = (uint64_t)(uintptr_t)buf;
	cb.aio_nbytes = sizeof buf;
	cb.aio_data = 42;
	return syscall(SYS_io_submit, ctx, 1, cbs);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(syscall(SYS_io_setup, 8, &ctx) == 0, "io_setup");
	int fd = open("/dev/zero", O_RDONLY);
	FID_SETUP(fd >= 0, "open /dev/zero");
	memset(buf, 1, sizeof buf);
	FID_SETUP(submit_read(fd) == 1, "io_submit");
	fid_ready();
	fid_wait();
	struct io_event ev[2];
	struct timespec ts = {1, 0};
	long n = syscall(SYS_io_getevents, ctx, 1, 2, ev, &ts);
	FID_EXPECT(n == 1 && ev[0].data == 42 && ev[0].res == sizeof buf, "io_getevents gives %ld events (data %llu res %lld), want the one read",
		   n, n > 0 ? (unsigned long long)ev[0].data : 0ULL, n > 0 ? (long long)ev[0].res : 0LL);
	FID_EXPECT(buf[0] == 0 && buf[63] == 0, "the read did not land");
	FID_EXPECT(submit_read(fd) == 1, "io_submit after: %s", strerror(errno));
	return fid_done();
}

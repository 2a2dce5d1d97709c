/*
 * mem_refused WHAT: memory state a restore cannot give back, which the dump
 * must refuse by name, leaving the program untouched (it checks that the
 * state is still there after the refused dump).
 *
 *   unreachable  a MAP_SHARED|MAP_ANONYMOUS object of 2 pages, both
 *                written, the second then unmapped: its data is in the
 *                object but no mapping covers it.
 *   sysv_part    a System V segment of 2 pages attached, its second page
 *                unmapped (an attachment in part).
 *   sem          a System V semaphore set the program operated on with SEM_UNDO
 *                (semop): the adjustment is held in the process, unreadable.
 *   secret       a memfd_secret page, mapped (its fd closed).
 *   hugetlb_shared  a MAP_SHARED|MAP_ANONYMOUS|MAP_HUGETLB huge page (skipped
 *                where no huge page is free and none can be reserved).
 */
#include "fidelity.h"

#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/syscall.h>


int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: %s LOG unreachable|sysv_part|sem|msg|secret|hugetlb_shared", argv[0]);
	unsigned char *p;
	int id = -1;
	if (strcmp(argv[2], "sem") == 0 || strcmp(argv[2], "msg") == 0) {
		int sem = argv[2][1] == 'e';
		id = sem ? semget(IPC_PRIVATE, 2, IPC_CREAT | 0600) : msgget(IPC_PRIVATE, IPC_CREAT | 0600);
		FID_SETUP(id >= 0, "semget/msgget: %s", strerror(errno));
		struct sembuf op = {1, 3, SEM_UNDO};
		struct {
			long type;
			char text[8];
		} m = {1, "hello"};
		FID_SETUP(sem ? semop(id, &op, 1) == 0 : msgsnd(id, &m, sizeof m.text, 0) == 0, "semop/msgsnd: %s", strerror(errno));
		fid_ready();
		fid_wait();
		if (sem)
			FID_EXPECT(semctl(id, 1, GETVAL) == 3, "semaphore value %d, want 3", semctl(id, 1, GETVAL));
		else
			FID_EXPECT(msgrcv(id, &m, sizeof m.text, 0, IPC_NOWAIT) == sizeof m.text && strcmp(m.text, "hello") == 0,
				   "message lost: %s", strerror(errno));
		sem ? semctl(id, 0, IPC_RMID) : msgctl(id, IPC_RMID, NULL);
		return fid_done();
	}
	if (strcmp(argv[2], "secret") == 0) {
		int fd = syscall(447, 0); /* memfd_secret */
		if (fd < 0)
			fid_skip("memfd_secret not available");
		FID_SETUP(ftruncate(fd, 4096) == 0, "ftruncate: %s", strerror(errno));
		p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		FID_SETUP(p != MAP_FAILED, "mmap: %s", strerror(errno));
		close(fd);
		memset(p, 0x5a, 4096);
		fid_ready();
		fid_wait();
		FID_EXPECT(p[100] == 0x5a, "secret memory changed");
		return fid_done();
	}
	if (strcmp(argv[2], "hugetlb_shared") == 0) {
		p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p == MAP_FAILED) {
			/* No free huge page: reserve two more. */
			char num[32] = "";
			int fd = open("/proc/sys/vm/nr_hugepages", O_RDWR);
			FID_SETUP(fd >= 0 && read(fd, num, sizeof num - 1) > 0, "read nr_hugepages");
			int n = snprintf(num, sizeof num, "%ld", strtol(num, NULL, 10) + 2);
			FID_SETUP(pwrite(fd, num, n, 0) == n, "reserve huge pages");
			close(fd);
			p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		}
		FID_SETUP(p != MAP_FAILED, "mmap MAP_SHARED|MAP_HUGETLB: %s", strerror(errno));
		memset(p, 0x5a, 4096);
		fid_ready();
		fid_wait();
		FID_EXPECT(p[100] == 0x5a, "hugetlb memory changed");
		return fid_done();
	}
	if (strcmp(argv[2], "unreachable") == 0) {
		p = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		FID_SETUP(p != MAP_FAILED, "mmap: %s", strerror(errno));
	} else {
		id = shmget(IPC_PRIVATE, 2 * 4096, IPC_CREAT | 0600);
		FID_SETUP(id >= 0, "shmget: %s", strerror(errno));
		p = shmat(id, NULL, 0);
		FID_SETUP(p != (void *)-1, "shmat: %s", strerror(errno));
		shmctl(id, IPC_RMID, NULL);
	}
	if (strcmp(argv[2], "unreachable") == 0 || strcmp(argv[2], "sysv_part") == 0) {
		memset(p, 0x5a, 2 * 4096);
		FID_SETUP(munmap(p + 4096, 4096) == 0, "munmap: %s", strerror(errno));
	}
	fid_ready();
	fid_wait();
	for (int i = 0; i < 4096; i++)
		if (p[i] != 0x5a) {
			FID_EXPECT(0, "byte %d changed", i);
			break;
		}
	return fid_done();
}

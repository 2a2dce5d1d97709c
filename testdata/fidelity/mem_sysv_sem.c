/*
 * mem_sysv_sem: a System V semaphore set the process operated on last,
 * without SEM_UNDO: five semaphores set with SETALL, then changed by
 * semop (no SEM_UNDO), one left with a waiter count of none. A set lives
 * in the IPC namespace, not in the process: after the restore it has the
 * same values, and the process is still the last to have operated on
 * each semaphore (GETPID); a semop still works on it, a nonblocking one
 * that would block still fails with EAGAIN.
 * (With SEM_UNDO the dump refuses: mem_refused "sem".)
 */
#include "fidelity.h"
#include <sys/ipc.h>
#include <sys/sem.h>

#define N 5

union semun {
	int val;
	struct semid_ds *buf;
	unsigned short *array;
};

static int id = -1;

static void drop(void)
{
	if (id >= 0)
		semctl(id, 0, IPC_RMID);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	id = semget(IPC_PRIVATE, N, IPC_CREAT | 0600);
	FID_SETUP(id >= 0, "semget: %s", strerror(errno));
	atexit(drop);
	unsigned short init[N] = {3, 0, 7, 1, 9};
	FID_SETUP(semctl(id, 0, SETALL, (union semun){.array = init}) == 0, "SETALL: %s", strerror(errno));
	struct sembuf ops[N] = {{0, -1, 0}, {1, 2, 0}, {2, -7, 0}, {3, 4, 0}, {4, -2, IPC_NOWAIT}};
	FID_SETUP(semop(id, ops, N) == 0, "semop: %s", strerror(errno));
	unsigned short want[N];
	FID_SETUP(semctl(id, 0, GETALL, (union semun){.array = want}) == 0, "GETALL: %s", strerror(errno));
	fid_ready();
	fid_wait();
	unsigned short now[N] = {0};
	FID_EXPECT(semctl(id, 0, GETALL, (union semun){.array = now}) == 0, "GETALL: %s", strerror(errno));
	for (int i = 0; i < N; i++) {
		FID_EXPECT(now[i] == want[i], "semaphore %d is %d, want %d", i, now[i], want[i]);
		int pid = semctl(id, i, GETPID);
		FID_EXPECT(pid == getpid(), "semaphore %d: last operated on by %d, want %d", i, pid, getpid());
	}
	struct sembuf block = {2, -1, IPC_NOWAIT}; /* semaphore 2 is 0 */
	FID_EXPECT(semop(id, &block, 1) < 0 && errno == EAGAIN, "a semop that would block did not fail with EAGAIN");
	struct sembuf take = {4, -7, 0};
	FID_EXPECT(semop(id, &take, 1) == 0 && semctl(id, 4, GETVAL) == 0, "semop on the restored set: %s", strerror(errno));
	return fid_done();
}

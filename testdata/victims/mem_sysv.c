/*
 * mem_sysv: System V shared memory (usage: mem_sysv LOG).
 *
 *   seg1  a segment with a key (from the pid), 3 pages + 100 bytes, mode
 *         0640, created with effective ids 65534 (its creator and owner),
 *         filled with a pattern (and a byte past its size, in its last
 *         page), attached by the root and, over fork, by an "echo" child,
 *         which also attaches it read-only (SHM_RDONLY) and reads the
 *         tokens it echoes there;
 *   seg2  an IPC_PRIVATE segment of 100 bytes marked for removal (IPC_RMID) while
 *         attached: it lives as long as the attachments.
 *
 * Start line: "start pid=P shmid=ID1 shmid2=ID2 echo=C". Ticks every
 * 20 ms, bumping a counter in seg1. SIGUSR1: both segments have their ids,
 * key, size, mode (SHM_DEST on seg2), owner, creator and 2 attachments, their
 * content, and the child echoes a token through seg1. SIGUSR2: the root
 * kills the child, removes seg1, says bye.
 */
#include "victim.h"

#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>

#define SIZE1 (3 * 4096 + 100)
#define SIZE2 100

static int id1, id2;
static key_t key1;
static unsigned char *s1, *s2;
static pid_t echo;

struct ctl {
	volatile uint64_t ticks, token, ack;
	volatile int ro_writable; /* the child could mprotect its read-only attachment writable */
};
#define CTL ((struct ctl *)(s1 + 4096))

static unsigned char pat(size_t i, int seg) { return (unsigned char)(mix64(i ^ ((uint64_t)seg << 32)) >> 7); }

static int check_seg(int id, key_t key, size_t size, int dest, uid_t owner, char *why, size_t len)
{
	struct shmid_ds ds;
	if (shmctl(id, IPC_STAT, &ds) < 0)
		return snprintf(why, len, "shmctl %d IPC_STAT: %s", id, strerror(errno)), -1;
	if (ds.shm_perm.__key != key || ds.shm_segsz != size || (ds.shm_perm.mode & 0777) != 0640 ||
	    !!(ds.shm_perm.mode & SHM_DEST) != dest || ds.shm_perm.uid != owner || ds.shm_perm.gid != owner ||
	    ds.shm_perm.cuid != owner || ds.shm_perm.cgid != owner || ds.shm_nattch != (id == id1 ? 3 : 2))
		return snprintf(why, len, "segment %d: key %#x size %zu mode %#o uid %d gid %d cuid %d cgid %d nattch %lu; "
				"want key %#x size %zu mode 0640%s, ids %d, nattch 3 (seg1) or 2",
				id, ds.shm_perm.__key, (size_t)ds.shm_segsz, ds.shm_perm.mode, ds.shm_perm.uid, ds.shm_perm.gid,
				ds.shm_perm.cuid, ds.shm_perm.cgid, (unsigned long)ds.shm_nattch, key, size, dest ? "+SHM_DEST" : "", owner), -1;
	return 0;
}

static int check(char *why, size_t len)
{
	if (s1[SIZE1 + 5] != 0x77)
		return snprintf(why, len, "seg1 byte past its size lost"), -1;
	if (CTL->ro_writable)
		return snprintf(why, len, "the child's SHM_RDONLY attachment could be made writable"), -1;
	if (check_seg(id1, key1, SIZE1, 0, 65534, why, len) < 0 || check_seg(id2, IPC_PRIVATE, SIZE2, 1, getuid(), why, len) < 0)
		return -1;
	if (CTL->ticks != ticks)
		return snprintf(why, len, "segment counter %lu, want %lu", (unsigned long)CTL->ticks, ticks), -1;
	for (size_t i = 0; i < SIZE1; i++)
		if (i / 4096 != 1 && s1[i] != pat(i, 1))
			return snprintf(why, len, "seg1 byte %zu differs", i), -1;
	for (size_t i = 0; i < SIZE2; i++)
		if (s2[i] != pat(i, 2))
			return snprintf(why, len, "seg2 byte %zu differs", i), -1;
	uint64_t tok = (mix64(ticks) ^ (uint64_t)time(NULL)) | 1;
	CTL->token = tok;
	for (int i = 0; i < 2000 && CTL->ack != tok; i++)
		victim_sleep(1);
	if (CTL->ack != tok)
		return snprintf(why, len, "the child did not echo token %#lx through the segment", (unsigned long)tok), -1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s LOG\n", argv[0]);
		return 2;
	}
	key1 = 0x6d650000 | (getpid() & 0xffff);
	if (setegid(65534) < 0 || seteuid(65534) < 0)
		die("seteuid");
	id1 = shmget(key1, SIZE1, IPC_CREAT | IPC_EXCL | 0640);
	if (seteuid(0) < 0 || setegid(0) < 0)
		die("seteuid back");
	id2 = shmget(IPC_PRIVATE, SIZE2, IPC_CREAT | 0640);
	if (id1 < 0 || id2 < 0)
		die("shmget");
	s1 = shmat(id1, NULL, 0);
	s2 = shmat(id2, NULL, 0);
	if (s1 == (void *)-1 || s2 == (void *)-1)
		die("shmat");
	if (shmctl(id2, IPC_RMID, NULL) < 0)
		die("IPC_RMID");
	for (size_t i = 0; i < SIZE1; i++)
		s1[i] = pat(i, 1);
	memset(s1 + 4096, 0, 4096);
	s1[SIZE1 + 5] = 0x77;
	for (size_t i = 0; i < SIZE2; i++)
		s2[i] = pat(i, 2);
	echo = fork();
	if (echo < 0)
		die("fork");
	if (echo == 0) {
		unsigned char *ro = shmat(id1, NULL, SHM_RDONLY);
		if (ro == (void *)-1)
			die("shmat SHM_RDONLY");
		struct ctl *rc = (struct ctl *)(ro + 4096);
		for (;;) {
			if (CTL->ack != rc->token) {
				CTL->ro_writable = mprotect(ro, 4096, PROT_READ | PROT_WRITE) == 0 || errno != EACCES;
				CTL->ack = rc->token;
			}
			victim_sleep(2);
		}
	}
	CTL->token = 1;
	for (int i = 0; i < 5000 && CTL->ack != 1; i++)
		victim_sleep(1);
	char extra[96];
	snprintf(extra, sizeof extra, "shmid=%d shmid2=%d echo=%d", id1, id2, echo);
	victim_start(argc, argv, 1, "LOG", O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, extra);
	for (;;) {
		victim_sleep(20);
		CTL->ticks = ++ticks;
		vlog("tick %lu", ticks);
		if (want_bye) {
			kill(echo, SIGKILL);
			waitpid(echo, NULL, 0);
			shmctl(id1, IPC_RMID, NULL);
		}
		victim_poll(check);
	}
}

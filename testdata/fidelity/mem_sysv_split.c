/*
 * mem_sysv_split: a System V shared memory segment of 4 pages attached
 * once, the attachment split into 4 mappings by mprotect (page 1 read-only,
 * page 3 PROT_NONE) and madvise (page 2 MADV_DONTDUMP, with data in every
 * page); a second, whole attachment of the same segment elsewhere (zdtm
 * shm-mp). After the restore the pieces are where they were, with the same
 * protections, offsets and flags (/proc/self/smaps), the segment is
 * attached as many times (shm_nattch counts each piece), its content is
 * the same, and the two attachments still share it.
 * (An attachment of which a part was unmapped is refused: mem_refused
 * "sysv_part".)
 */
#include "fidelity.h"
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>

#define NPAGES 4

static int id = -1;

static void drop(void)
{
	if (id >= 0)
		shmctl(id, IPC_RMID, NULL);
}

/* layout writes the smaps header and VmFlags lines of the mappings in
 * [lo, hi) into out. */
static void layout(unsigned long lo, unsigned long hi, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	size_t n = 0;
	int in = 0;
	out[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		unsigned long s, e;
		if (sscanf(line, "%lx-%lx ", &s, &e) == 2) { /* a mapping's header */
			in = s >= lo && e <= hi;
			if (in)
				n += snprintf(out + n, len - n, "%s", line);
		} else if (in && strncmp(line, "VmFlags:", 8) == 0)
			n += snprintf(out + n, len - n, "%s", line);
		if (n >= len)
			break;
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	long ps = sysconf(_SC_PAGESIZE);
	id = shmget(IPC_PRIVATE, NPAGES * ps, IPC_CREAT | 0600);
	FID_SETUP(id >= 0, "shmget: %s", strerror(errno));
	atexit(drop);
	unsigned char *p = shmat(id, NULL, 0);
	FID_SETUP(p != (void *)-1, "shmat: %s", strerror(errno));
	unsigned char *q = shmat(id, NULL, 0);
	FID_SETUP(q != (void *)-1, "second shmat: %s", strerror(errno));
	for (long i = 0; i < NPAGES * ps; i++)
		p[i] = (unsigned char)(i * 7 + i / ps);
	FID_SETUP(mprotect(p + ps, ps, PROT_READ) == 0, "mprotect: %s", strerror(errno));
	FID_SETUP(madvise(p + 2 * ps, ps, MADV_DONTDUMP) == 0, "madvise: %s", strerror(errno));
	FID_SETUP(mprotect(p + 3 * ps, ps, PROT_NONE) == 0, "mprotect: %s", strerror(errno));
	struct shmid_ds ds;
	FID_SETUP(shmctl(id, IPC_STAT, &ds) == 0, "IPC_STAT: %s", strerror(errno));
	unsigned long nattch = ds.shm_nattch;
	FID_SETUP(nattch == NPAGES + 1, "shm_nattch %lu, want %d", nattch, NPAGES + 1);
	static char before[4096], after[4096], qbefore[1024], qafter[1024];
	layout((unsigned long)p, (unsigned long)p + NPAGES * ps, before, sizeof before);
	layout((unsigned long)q, (unsigned long)q + NPAGES * ps, qbefore, sizeof qbefore);
	fid_ready();
	fid_wait();
	layout((unsigned long)p, (unsigned long)p + NPAGES * ps, after, sizeof after);
	layout((unsigned long)q, (unsigned long)q + NPAGES * ps, qafter, sizeof qafter);
	FID_EXPECT(strcmp(before, after) == 0, "split attachment was\n%s now\n%s", before, after);
	FID_EXPECT(strcmp(qbefore, qafter) == 0, "whole attachment was\n%s now\n%s", qbefore, qafter);
	FID_EXPECT(shmctl(id, IPC_STAT, &ds) == 0 && ds.shm_nattch == nattch, "shm_nattch %lu, want %lu",
		   (unsigned long)ds.shm_nattch, nattch);
	long bad = -1;
	for (long i = 0; i < 3 * ps && bad < 0; i++)
		if (p[i] != (unsigned char)(i * 7 + i / ps))
			bad = i;
	FID_EXPECT(bad < 0, "content differs at byte %ld of the split attachment", bad);
	for (long i = 0; i < NPAGES * ps && bad < 0; i++)
		if (q[i] != (unsigned char)(i * 7 + i / ps))
			bad = i;
	FID_EXPECT(bad < 0, "content differs at byte %ld of the whole attachment", bad);
	q[5] = 0x5a;
	q[2 * ps + 9] = 0xa5;
	FID_EXPECT(p[5] == 0x5a && p[2 * ps + 9] == 0xa5, "the two attachments do not share the segment");
	FID_EXPECT(shmdt(p) == 0, "shmdt of the split attachment: %s", strerror(errno));
	FID_EXPECT(shmctl(id, IPC_STAT, &ds) == 0 && ds.shm_nattch == 1, "after shmdt shm_nattch %lu, want 1",
		   (unsigned long)ds.shm_nattch);
	return fid_done();
}

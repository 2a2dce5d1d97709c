/*
 * mem_sysv_msg [gone]: System V message queues the program uses come back
 * with their id, key, owner, mode, byte limit, messages in order, and last
 * sender and receiver.
 *
 * Two queues: a private one and one with a key (mode 0640, byte limit
 * 4000). In each the program sends "alpha" (type 1), an empty message
 * (type 2) and 100 bytes (type 7), takes "alpha" back (it is the last
 * receiver), then its child sends "from child" (type 3) and waits (the
 * child is the last sender). The ids are written to DIR/msqids.
 *
 * With "gone" the test removes both queues between the dump and the
 * restore: the restore must make them again (their times are the
 * restore's then; without "gone" they must be unchanged too).
 */
#include "fidelity.h"

#include <sys/msg.h>
#include <sys/wait.h>

struct msg {
	long type;
	char text[128];
};

static int sendm(int id, long type, const char *text, size_t len)
{
	struct msg m = {.type = type};
	memcpy(m.text, text, len);
	return msgsnd(id, &m, len, IPC_NOWAIT);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc >= 3, "usage: %s LOG DIR/msqids [gone]", argv[0]);
	int gone = argc > 3 && strcmp(argv[3], "gone") == 0;
	char big[100];
	memset(big, 'z', sizeof big);
	int id[2];
	id[0] = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
	FID_SETUP(id[0] >= 0, "msgget private");
	key_t key = 0x6b700000 | (getpid() & 0xffff);
	id[1] = msgget(key, IPC_CREAT | IPC_EXCL | 0640);
	FID_SETUP(id[1] >= 0, "msgget key %#x", key);
	struct msqid_ds ds;
	FID_SETUP(msgctl(id[1], IPC_STAT, &ds) == 0, "IPC_STAT");
	ds.msg_qbytes = 4000;
	FID_SETUP(msgctl(id[1], IPC_SET, &ds) == 0, "IPC_SET qbytes");
	for (int i = 0; i < 2; i++) {
		FID_SETUP(sendm(id[i], 1, "alpha", 5) == 0 && sendm(id[i], 2, "", 0) == 0 && sendm(id[i], 7, big, sizeof big) == 0, "msgsnd");
		struct msg m;
		FID_SETUP(msgrcv(id[i], &m, sizeof m.text, 0, IPC_NOWAIT) == 5 && m.type == 1, "msgrcv alpha");
	}
	int done[2];
	FID_SETUP(pipe(done) == 0, "pipe");
	pid_t kid = fork();
	FID_SETUP(kid >= 0, "fork");
	if (kid == 0) {
		close(done[0]);
		for (int i = 0; i < 2; i++)
			if (sendm(id[i], 3, "from child", 10) != 0)
				_exit(1);
		close(done[1]);
		for (;;)
			pause();
	}
	close(done[1]);
	char c;
	FID_SETUP(read(done[0], &c, 1) == 0, "child sent");
	int st;
	FID_SETUP(waitpid(kid, &st, WNOHANG) == 0, "child ended");
	FILE *f = fopen(argv[2], "w");
	FID_SETUP(f && fprintf(f, "%d %d\n", id[0], id[1]) > 0 && fclose(f) == 0, "write %s", argv[2]);
	struct msqid_ds before[2];
	for (int i = 0; i < 2; i++)
		FID_SETUP(msgctl(id[i], IPC_STAT, &before[i]) == 0, "IPC_STAT");
	fid_ready();
	fid_wait();
	for (int i = 0; i < 2; i++) {
		struct msqid_ds now;
		if (msgctl(id[i], IPC_STAT, &now) != 0) {
			fid_fail("queue %d: IPC_STAT: %s", id[i], strerror(errno));
			continue;
		}
		struct ipc_perm *a = &now.msg_perm, *b = &before[i].msg_perm;
		FID_EXPECT(a->__key == b->__key && a->uid == b->uid && a->gid == b->gid && a->cuid == b->cuid && a->cgid == b->cgid &&
				   a->mode == b->mode,
			   "queue %d: key %#x owner %d:%d creator %d:%d mode %#o; want %#x %d:%d %d:%d %#o", id[i], a->__key, a->uid,
			   a->gid, a->cuid, a->cgid, a->mode, b->__key, b->uid, b->gid, b->cuid, b->cgid, b->mode);
		FID_EXPECT(now.msg_qnum == 3 && now.msg_cbytes == before[i].msg_cbytes && now.msg_qbytes == before[i].msg_qbytes,
			   "queue %d: %lu messages %lu bytes limit %lu; want 3 %lu %lu", id[i], now.msg_qnum, now.msg_cbytes,
			   now.msg_qbytes, before[i].msg_cbytes, before[i].msg_qbytes);
		FID_EXPECT(now.msg_lspid == kid && now.msg_lrpid == getpid(), "queue %d: last sender %d receiver %d; want %d %d", id[i],
			   now.msg_lspid, now.msg_lrpid, kid, getpid());
		if (!gone)
			FID_EXPECT(now.msg_stime == before[i].msg_stime && now.msg_rtime == before[i].msg_rtime &&
					   now.msg_ctime == before[i].msg_ctime,
				   "queue %d: times changed", id[i]);
		struct msg m;
		ssize_t n = msgrcv(id[i], &m, sizeof m.text, 0, IPC_NOWAIT);
		FID_EXPECT(n == 0 && m.type == 2, "queue %d: first message %zd bytes type %ld, want the empty one of type 2", id[i], n, m.type);
		n = msgrcv(id[i], &m, sizeof m.text, 0, IPC_NOWAIT);
		FID_EXPECT(n == 100 && m.type == 7 && memcmp(m.text, big, 100) == 0, "queue %d: second message %zd bytes type %ld", id[i], n,
			   m.type);
		n = msgrcv(id[i], &m, sizeof m.text, 0, IPC_NOWAIT);
		FID_EXPECT(n == 10 && m.type == 3 && memcmp(m.text, "from child", 10) == 0, "queue %d: third message %zd bytes type %ld",
			   id[i], n, m.type);
		FID_EXPECT(msgrcv(id[i], &m, sizeof m.text, 0, IPC_NOWAIT) < 0 && errno == ENOMSG, "queue %d: a fourth message", id[i]);
		msgctl(id[i], IPC_RMID, NULL);
	}
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	return fid_done();
}

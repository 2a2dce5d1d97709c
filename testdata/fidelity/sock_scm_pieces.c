/*
 * sock_scm_pieces: where a piece of a UNIX stream with files in flight
 * starts. A read gets the files with the first byte it takes of the piece
 * (the send) they came with, and stops after that piece; a peek cannot
 * tell where the piece starts (bytes sent before it with the same
 * credentials come in one peek with it): the dump reads it from the
 * kernel's queue.
 *
 * Three stream pairs, each with SO_PASSCRED on the receiving end, are
 * sent the same: "ij" with credentials uid 1234 gid 4321, "kl", "opq"
 * with two files (the read end of a pipe and a regular file), "rs", "t"
 * with the pipe again; then "xy" and a send of BIG bytes with the pipe
 * (cut by the kernel into several pieces, the files on the first). After
 * the restore they are read:
 *   pair 1 one byte at a time: the files come with "o", "t" and the
 *     first byte after "xy";
 *   pair 2 three bytes at a time: "ij" (other credentials), "klo" with
 *     the two files, "pqr", "st" with one, then "xy" and 1 byte of the big
 *     send with its file;
 *   pair 3, whose "ij" and "k" were read before the dump (the piece "kl"
 *     is partly read): one byte "l" without files, then 4096 bytes at a
 *     time: "opq" with two, "rst" with one, then 3 bytes: "xy" and 1 of the
 *     big send with one.
 * The rest of the big send, in as few reads as come, brings no files.
 */
#include "sock.h"
#include <sys/socket.h>
#include <sys/syscall.h>

#define BIG (100 * 1024)

/* readexp reads up to size bytes from s and checks that they are want
 * (NULL: any bytes, n of them) with the files wantf (P's fds they must
 * be the descriptions of) and, if uid >= 0, those credentials. */
static void readexp(int s, size_t size, const char *what, const char *want, ssize_t n, const int *wantf, int nwant, int uid)
{
	static char data[BIG + 16];
	char cbuf[CMSG_SPACE(8 * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
	struct iovec io = {data, size};
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t got = recvmsg(s, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (got < 0) {
		fid_fail("%s: recvmsg: %s", what, strerror(errno));
		return;
	}
	if (want)
		n = strlen(want);
	FID_EXPECT(got == n && (!want || memcmp(data, want, n) == 0), "%s: read %zd bytes %.*s, want %zd %s", what, got,
		   (int)(got < 16 ? got : 16), data, n, want ? want : "");
	int nf = 0, fds[8];
	struct ucred cred = {0};
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			memcpy(fds, CMSG_DATA(c), nf * sizeof(int));
		}
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS)
			memcpy(&cred, CMSG_DATA(c), sizeof cred);
	}
	FID_EXPECT(nf == nwant, "%s: %d files in flight, want %d", what, nf, nwant);
	for (int i = 0; i < nf && i < nwant; i++)
		FID_EXPECT(same(fds[i], wantf[i]), "%s: file %d in flight is not the description of P's fd %d", what, i, wantf[i]);
	for (int i = 0; i < nf; i++)
		close(fds[i]);
	if (uid >= 0)
		FID_EXPECT((int)cred.uid == uid, "%s: credentials uid %d, want %d", what, cred.uid, uid);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	char tmpl[] = "/tmp/sock_scm_pieces_XXXXXX";
	char *dir = mkdtemp(tmpl);
	FID_SETUP(dir, "mkdtemp");
	char fpath[256];
	snprintf(fpath, sizeof fpath, "%s/f", dir);
	int f = open(fpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	FID_SETUP(f >= 0, "file f");
	int pw[2];
	FID_SETUP(pipe(pw) == 0, "pipe");
	static char big[BIG];
	for (int i = 0; i < BIG; i++)
		big[i] = 'A' + i % 26;

	int p[3][2];
	struct ucred forged = {getpid(), 1234, 4321};
	int two[] = {pw[0], f}, one[] = {pw[0]};
	for (int i = 0; i < 3; i++) {
		FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, p[i]) == 0, "socketpair %d", i);
		int on = 1, sz = 4 * BIG;
		FID_SETUP(setsockopt(p[i][1], SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0, "SO_PASSCRED");
		FID_SETUP(setsockopt(p[i][0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz) == 0, "SO_SNDBUF");
		sendfds(p[i][0], "ij", 2, NULL, 0, &forged);
		sendfds(p[i][0], "kl", 2, NULL, 0, NULL);
		sendfds(p[i][0], "opq", 3, two, 2, NULL);
		sendfds(p[i][0], "rs", 2, NULL, 0, NULL);
		sendfds(p[i][0], "t", 1, one, 1, NULL);
		sendfds(p[i][0], "xy", 2, NULL, 0, NULL);
		sendfds(p[i][0], big, BIG, one, 1, NULL);
	}

	/* Pair 3: "ij", then "k" of the piece "kl" read now. */
	readexp(p[2][1], 4096, "pair 3 read before", "ij", 0, NULL, 0, 1234);
	readexp(p[2][1], 1, "pair 3 read before", "k", 0, NULL, 0, 0);

	fid_ready();
	fid_wait();

	/* Pair 1, one byte at a time. */
	const char *seq = "ijklopqrstxy";
	for (const char *c = seq; *c; c++) {
		char what[32], want[2] = {*c, 0};
		snprintf(what, sizeof what, "pair 1 byte %c", *c);
		if (*c == 'o')
			readexp(p[0][1], 1, what, want, 0, two, 2, 0);
		else if (*c == 't')
			readexp(p[0][1], 1, what, want, 0, one, 1, 0);
		else
			readexp(p[0][1], 1, what, want, 0, NULL, 0, *c < 'k' ? 1234 : 0);
	}
	readexp(p[0][1], 1, "pair 1 first byte of the big send", "A", 0, one, 1, 0);
	readexp(p[0][1], 1, "pair 1 second byte of the big send", "B", 0, NULL, 0, 0);

	/* Pair 2, three bytes at a time. */
	readexp(p[1][1], 3, "pair 2 read 1", "ij", 0, NULL, 0, 1234);
	readexp(p[1][1], 3, "pair 2 read 2", "klo", 0, two, 2, 0);
	readexp(p[1][1], 3, "pair 2 read 3", "pqr", 0, NULL, 0, 0);
	readexp(p[1][1], 3, "pair 2 read 4", "st", 0, one, 1, 0);
	readexp(p[1][1], 3, "pair 2 read 5", "xyA", 0, one, 1, 0);
	readexp(p[1][1], 3, "pair 2 read 6", "BCD", 0, NULL, 0, 0);

	/* Pair 3: the byte left of "kl", then 4096 bytes at a time. */
	readexp(p[2][1], 1, "pair 3 read 1", "l", 0, NULL, 0, 0);
	readexp(p[2][1], 4096, "pair 3 read 2", "opq", 0, two, 2, 0);
	readexp(p[2][1], 4096, "pair 3 read 3", "rst", 0, one, 1, 0);

	/* The rest of each: every byte of the big send, no more files. */
	for (int i = 0; i < 3; i++) {
		size_t off = i == 0 ? 2 : i == 1 ? 4 : 0, left = BIG - off;
		if (i == 2) {
			/* "xy" and the start of the big send come with its file. */
			readexp(p[2][1], 3, "pair 3 read 4", "xyA", 0, one, 1, 0);
			off = 1, left = BIG - 1;
		}
		static char buf[BIG];
		while (left > 0) {
			char cbuf[CMSG_SPACE(8 * sizeof(int))];
			struct iovec io = {buf, left};
			struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
			ssize_t n = recvmsg(p[i][1], &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
			if (n <= 0) {
				fid_fail("pair %d: %zu bytes of the big send missing (%s)", i + 1, left, n < 0 ? strerror(errno) : "end");
				break;
			}
			int files = 0;
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
				if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
					files++;
			FID_EXPECT(files == 0, "pair %d: files in flight with byte %zu of the big send", i + 1, off);
			FID_EXPECT(memcmp(buf, big + off, n) == 0, "pair %d: bytes %zu.. of the big send differ", i + 1, off);
			off += n, left -= n;
		}
		char x;
		FID_EXPECT(recv(p[i][1], &x, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "pair %d: more bytes queued", i + 1);
	}
	unlink(fpath), rmdir(dir);
	return fid_done();
}

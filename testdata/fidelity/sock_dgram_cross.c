/*
 * sock_dgram_cross: two unconnected UNIX datagram sockets of one process,
 * each bound to an abstract name, each with datagrams from the other
 * queued (MPICH's processes hold such sockets). After the restore each
 * reads its messages in order, and recvfrom names the other as sender.
 */
#include "sock.h"
#include <stddef.h>

static void bind_abstract(int fd, const char *name, struct sockaddr_un *a, socklen_t *len)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	size_t n = strlen(name);
	memcpy(a->sun_path + 1, name, n);
	*len = offsetof(struct sockaddr_un, sun_path) + 1 + n;
	FID_SETUP(bind(fd, (struct sockaddr *)a, *len) == 0, "bind @%s", name);
}

static void expect_msg(int fd, const char *want, const struct sockaddr_un *from, socklen_t fromlen, const char *who)
{
	char buf[64] = "";
	struct sockaddr_un got;
	socklen_t gotlen = sizeof got;
	ssize_t n = recvfrom(fd, buf, sizeof buf - 1, MSG_DONTWAIT, (struct sockaddr *)&got, &gotlen);
	FID_EXPECT(n == (ssize_t)strlen(want) && memcmp(buf, want, n) == 0, "%s: got \"%.*s\" (%zd), want \"%s\"",
		   who, (int)(n > 0 ? n : 0), buf, n, want);
	FID_EXPECT(gotlen == fromlen && memcmp(&got, from, fromlen) == 0, "%s: message \"%s\" from another sender", who, want);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	char na[64], nb[64];
	snprintf(na, sizeof na, "fid-cross-a-%d", getpid());
	snprintf(nb, sizeof nb, "fid-cross-b-%d", getpid());
	int a = socket(AF_UNIX, SOCK_DGRAM, 0), b = socket(AF_UNIX, SOCK_DGRAM, 0);
	FID_SETUP(a >= 0 && b >= 0, "socket");
	struct sockaddr_un aa, ab;
	socklen_t la, lb;
	bind_abstract(a, na, &aa, &la);
	bind_abstract(b, nb, &ab, &lb);
	FID_SETUP(sendto(a, "a1", 2, 0, (struct sockaddr *)&ab, lb) == 2, "a to b");
	FID_SETUP(sendto(b, "b1", 2, 0, (struct sockaddr *)&aa, la) == 2, "b to a");
	FID_SETUP(sendto(a, "a2", 2, 0, (struct sockaddr *)&ab, lb) == 2, "a to b again");
	fid_ready();
	fid_wait();
	expect_msg(b, "a1", &aa, la, "b");
	expect_msg(b, "a2", &aa, la, "b");
	expect_msg(a, "b1", &ab, lb, "a");
	char c;
	FID_EXPECT(recv(a, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "a: more queued than sent");
	FID_EXPECT(recv(b, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "b: more queued than sent");
	return fid_done();
}

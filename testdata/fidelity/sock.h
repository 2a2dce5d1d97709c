/*
 * sock.h: helpers of the socket cases (sock_*.c): set an option,
 * "watch" options (their bytes read back before the restore, compared
 * after it), send files in flight and credentials, compare descriptions.
 */
#ifndef SOCK_H
#define SOCK_H
#include "fidelity.h"
#include <arpa/inet.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define SETOPT(fd, level, name, val)                                                     \
	do {                                                                             \
		int v_ = (val);                                                          \
		FID_SETUP(setsockopt(fd, level, name, &v_, sizeof v_) == 0, "setsockopt %s", #name); \
	} while (0)

#define SETOPTP(fd, level, name, p, len)                                                 \
	FID_SETUP(setsockopt(fd, level, name, p, len) == 0, "setsockopt %s", #name)

struct watched {
	int fd, level, name;
	const char *label;
	char who[32];
	unsigned char val[64];
	socklen_t len;
};

static struct watched watches[512];
static int nwatches;

/* watch records the current value of an option of fd. */
static __attribute__((unused)) void watch(int fd, const char *who, int level, int name, const char *label)
{
	FID_SETUP(nwatches < (int)(sizeof watches / sizeof watches[0]), "too many watches");
	struct watched *w = &watches[nwatches++];
	w->fd = fd, w->level = level, w->name = name, w->label = label;
	snprintf(w->who, sizeof w->who, "%s", who);
	w->len = sizeof w->val;
	memset(w->val, 0, sizeof w->val);
	FID_SETUP(getsockopt(fd, level, name, w->val, &w->len) == 0, "getsockopt %s %s", who, label);
}

#define WATCH(fd, who, level, name) watch(fd, who, level, name, #name)

/* check_watches compares every watched option with its value now. */
static __attribute__((unused)) void check_watches(void)
{
	for (int i = 0; i < nwatches; i++) {
		struct watched *w = &watches[i];
		unsigned char now[64];
		socklen_t len = sizeof now;
		memset(now, 0, sizeof now);
		if (getsockopt(w->fd, w->level, w->name, now, &len) < 0) {
			fid_fail("%s %s: getsockopt: %s", w->who, w->label, strerror(errno));
			continue;
		}
		if (len != w->len || memcmp(now, w->val, len) != 0) {
			int a = 0, b = 0;
			memcpy(&a, w->val, w->len < 4 ? w->len : 4);
			memcpy(&b, now, len < 4 ? len : 4);
			fid_fail("%s %s: %d (len %u), want %d (len %u)", w->who, w->label, b, len, a, w->len);
		}
	}
}

/* accept_all attaches a classic BPF filter that accepts every packet. */
static __attribute__((unused)) void accept_all(int fd)
{
	struct sock_filter code[] = {{BPF_RET | BPF_K, 0, 0, 0xffffffff}};
	struct sock_fprog prog = {1, code};
	SETOPTP(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
}

/* read_exact reads n bytes (poll with a 10 s bound): 0 if all came. */
static __attribute__((unused)) int read_exact(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 10000) != 1)
			return -1;
		ssize_t k = recv(fd, (char *)buf + got, n - got, MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k <= 0)
			return -1;
		got += k;
	}
	return 0;
}

/* write_all writes n bytes (poll with a 10 s bound): 0 if all went. */
static __attribute__((unused)) int write_all(int fd, const void *buf, size_t n)
{
	size_t done = 0;
	while (done < n) {
		struct pollfd p = {fd, POLLOUT, 0};
		if (poll(&p, 1, 10000) != 1)
			return -1;
		ssize_t k = send(fd, (const char *)buf + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k <= 0)
			return -1;
		done += k;
	}
	return 0;
}

/* pattern is byte i of a stream seeded with seed. */
static __attribute__((unused)) unsigned char pattern(unsigned seed, size_t i)
{
	return (unsigned char)((i * 2654435761u + seed) >> 7);
}
/* loopback_addr fills ss with the loopback address and port: 127.0.0.1,
 * or with v6 ::1 (mapped: ::ffff:127.0.0.1), and returns its length. */
static __attribute__((unused)) socklen_t loopback_addr(struct sockaddr_storage *ss, int port, int v6, int mapped)
{
	memset(ss, 0, sizeof *ss);
	if (!v6) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return sizeof *a;
	}
	struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
	a->sin6_family = AF_INET6;
	a->sin6_port = htons(port);
	inet_pton(AF_INET6, mapped ? "::ffff:127.0.0.1" : "::1", &a->sin6_addr);
	return sizeof *a;
}

/* tcp_state is fd's TCP state (tcp_info), -1 if it cannot be read. */
static __attribute__((unused)) int tcp_state(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof ti;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
		return -1;
	return ti.tcpi_state;
}

/* inet_socket makes a socket of type: IPv4, or with v6 IPv6 (mapped:
 * IPV6_V6ONLY off, for v4-mapped addresses). */
static __attribute__((unused)) int inet_socket(int type, int v6, int mapped)
{
	int fd = socket(v6 ? AF_INET6 : AF_INET, type, 0);
	FID_SETUP(fd >= 0, "socket");
	if (v6)
		SETOPT(fd, IPPROTO_IPV6, IPV6_V6ONLY, !mapped);
	return fd;
}

/* tcp_state_within says whether fd's TCP state is st, waiting for it up
 * to 5 s. */
static __attribute__((unused)) int tcp_state_within(int fd, int st)
{
	for (int i = 0; i < 5000 && tcp_state(fd) != st; i++)
		usleep(1000);
	return tcp_state(fd) == st;
}

#include <sys/syscall.h>
#ifndef KCMP_FILE
#define KCMP_FILE 0
#endif

/* sendfds sends b (len n) on s with nf (up to 8) files and, if cred,
 * credentials. */
static __attribute__((unused)) void sendfds(int s, const char *b, size_t n, const int *fds, int nf, const struct ucred *cred)
{
	char cbuf[CMSG_SPACE(8 * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
	memset(cbuf, 0, sizeof cbuf);
	struct iovec io = {(void *)b, n};
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = 0};
	struct cmsghdr *c = (struct cmsghdr *)cbuf;
	if (nf) {
		c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(nf * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nf * sizeof(int));
		m.msg_controllen += CMSG_SPACE(nf * sizeof(int));
		c = (struct cmsghdr *)(cbuf + m.msg_controllen);
	}
	if (cred) {
		c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_CREDENTIALS, c->cmsg_len = CMSG_LEN(sizeof *cred);
		memcpy(CMSG_DATA(c), cred, sizeof *cred);
		m.msg_controllen += CMSG_SPACE(sizeof *cred);
	}
	if (!m.msg_controllen)
		m.msg_control = NULL;
	FID_SETUP(sendmsg(s, &m, 0) == (ssize_t)n, "sendmsg of %zu bytes %.*s", n, (int)(n < 16 ? n : 16), b);
}

/* same tells whether fds a and b of this process are one open file
 * description (kcmp). */
static __attribute__((unused)) int same(int a, int b)
{
	pid_t me = getpid();
	return syscall(SYS_kcmp, me, me, KCMP_FILE, a, b) == 0;
}

#endif

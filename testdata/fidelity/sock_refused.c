/*
 * sock_refused KIND: holds a socket in a state ckpt cannot restore (or
 * not yet): SCM_RIGHTS in flight, an eBPF socket filter, an MPTCP
 * connection (accepted from an MPTCP listener), an MPTCP listener with a
 * connection waiting in its accept queue, a TCP
 * connection reset by its peer, one in CLOSE_WAIT or FIN_WAIT2, a UNIX
 * connection to a process outside the dump, connections waiting in a TCP
 * listener's accept queue or in a UNIX one's with a file in flight no
 * process holds, a pending socket error. The dump must refuse it by
 * name; untouched, the socket is as it was.
 */
#include "sock.h"
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <stddef.h>
#include <sys/wait.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

static int tcp_pair(int *cli, int *srv, int *lst)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof a;
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	FID_SETUP(bind(ls, (struct sockaddr *)&a, l) == 0 && listen(ls, 4) == 0, "listen");
	FID_SETUP(getsockname(ls, (struct sockaddr *)&a, &l) == 0, "getsockname");
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	FID_SETUP(connect(*cli, (struct sockaddr *)&a, l) == 0, "connect");
	if (srv)
		*srv = accept(ls, NULL, NULL);
	*lst = ls;
	return 0;
}


static void wait_state(int fd, int st)
{
	for (int i = 0; i < 1000 && tcp_state(fd) != st; i++)
		usleep(5000);
	FID_SETUP(tcp_state(fd) == st, "TCP state %d, want %d", tcp_state(fd), st);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: sock_refused LOG KIND");
	const char *kind = argv[2];
	int fd = -1, other = -1, lst = -1, st = -1;
	pid_t outside = 0;
	if (strcmp(kind, "scm_rights") == 0) {
		int sp[2];
		FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec io = {"x", 1};
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
		int pass = 0;
		memcpy(CMSG_DATA(c), &pass, sizeof pass);
		FID_SETUP(sendmsg(sp[1], &m, 0) == 1, "sendmsg");
		fd = sp[0], other = sp[1];
	} else if (strcmp(kind, "ebpf_filter") == 0) {
		struct bpf_insn prog[] = {
			{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = -1},
			{.code = BPF_JMP | BPF_EXIT},
		};
		union bpf_attr at = {.prog_type = BPF_PROG_TYPE_SOCKET_FILTER, .insn_cnt = 2, .insns = (unsigned long)prog,
				     .license = (unsigned long)"GPL"};
		int p = syscall(SYS_bpf, BPF_PROG_LOAD, &at, sizeof at);
		if (p < 0)
			fid_skip("BPF_PROG_LOAD");
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		SETOPT(fd, SOL_SOCKET, SO_ATTACH_BPF, p);
		close(p);
	} else if (strcmp(kind, "mptcp") == 0 || strcmp(kind, "mptcp_acceptq") == 0) {
		/* An MPTCP listener; a client (MPTCP for "mptcp": the
		 * accepted end is an MPTCP connection; plain TCP left in the
		 * accept queue for "mptcp_acceptq"). */
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t l = sizeof a;
		lst = socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP);
		if (lst < 0)
			fid_skip("no MPTCP");
		FID_SETUP(bind(lst, (struct sockaddr *)&a, l) == 0 && listen(lst, 4) == 0, "listen");
		FID_SETUP(getsockname(lst, (struct sockaddr *)&a, &l) == 0, "getsockname");
		int acceptq = strcmp(kind, "mptcp_acceptq") == 0;
		other = socket(AF_INET, SOCK_STREAM, acceptq ? 0 : IPPROTO_MPTCP);
		FID_SETUP(connect(other, (struct sockaddr *)&a, l) == 0, "connect");
		struct pollfd p = {lst, POLLIN, 0};
		FID_SETUP(poll(&p, 1, 5000) == 1, "poll");
		if (acceptq) {
			fd = lst;
		} else {
			fd = accept(lst, NULL, NULL);
			int pr = 0;
			socklen_t pl = sizeof pr;
			FID_SETUP(fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &pr, &pl) == 0 && pr == IPPROTO_MPTCP,
				  "accepted SO_PROTOCOL %d, want MPTCP", pr);
		}
	} else if (strcmp(kind, "reset") == 0) {
		tcp_pair(&fd, &other, &lst);
		struct linger lg = {1, 0};
		SETOPTP(other, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		close(other);
		other = -1;
		wait_state(fd, TCP_CLOSE);
		char c;
		recv(fd, &c, 1, MSG_DONTWAIT); /* takes ECONNRESET */
	} else if (strcmp(kind, "close_wait") == 0) {
		tcp_pair(&fd, &other, &lst);
		FID_SETUP(shutdown(other, SHUT_WR) == 0, "shutdown");
		wait_state(fd, TCP_CLOSE_WAIT);
	} else if (strcmp(kind, "fin_wait2") == 0) {
		tcp_pair(&fd, &other, &lst);
		FID_SETUP(shutdown(fd, SHUT_WR) == 0, "shutdown");
		wait_state(fd, TCP_FIN_WAIT2);
	} else if (strcmp(kind, "tcp_acceptq") == 0) {
		tcp_pair(&other, NULL, &lst);
		struct pollfd p = {lst, POLLIN, 0};
		FID_SETUP(poll(&p, 1, 5000) == 1, "poll");
		fd = lst;
	} else if (strcmp(kind, "unix_acceptq") == 0) {
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "sock_refused-%d", getpid());
		socklen_t l = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a.sun_path + 1);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		FID_SETUP(bind(fd, (struct sockaddr *)&a, l) == 0 && listen(fd, 4) == 0, "listen");
		other = socket(AF_UNIX, SOCK_STREAM, 0);
		FID_SETUP(connect(other, (struct sockaddr *)&a, l) == 0, "connect");
		/* A file in flight sent before the accept and closed since:
		 * only the server end's queue holds it, which nothing but
		 * accept() reaches. */
		int pp[2];
		FID_SETUP(pipe(pp) == 0, "pipe");
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec io = {"early", 5};
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pp[0], sizeof(int));
		FID_SETUP(sendmsg(other, &m, 0) == 5, "send a file before accept");
		close(pp[0]);
		close(pp[1]);
	} else if (strcmp(kind, "unix_external") == 0) {
		/* The peer is a grandchild reparented away: outside the tree. */
		int sp[2], ready[2];
		FID_SETUP(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0 && pipe(ready) == 0, "socketpair");
		pid_t c = fork();
		if (c == 0) {
			if (fork() == 0) {
				close(sp[0]);
				/* Out of P's session too: the dump refuses a
				 * session with a member outside it first. */
				if (setsid() < 0)
					_exit(1);
				char b = 0;
				if (write(ready[1], &b, 1) != 1)
					_exit(1);
				while (read(sp[1], &b, 1) > 0) /* until the case ends */
					;
				_exit(0);
			}
			_exit(0);
		}
		waitpid(c, NULL, 0);
		char b;
		FID_SETUP(read(ready[0], &b, 1) == 1, "grandchild");
		close(sp[1]);
		fd = sp[0];
	} else if (strcmp(kind, "pending_error") == 0) {
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		FID_SETUP(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect");
		FID_SETUP(send(fd, "x", 1, 0) == 1, "send");
		struct pollfd p = {fd, 0, 0};
		for (int i = 0; i < 1000 && !(p.revents & POLLERR); i++)
			poll(&p, 1, 5);
		FID_SETUP(p.revents & POLLERR, "no ICMP error");
	} else {
		FID_SETUP(0, "unknown kind %s", kind);
	}
	if (fd >= 0 && (strcmp(kind, "close_wait") == 0 || strcmp(kind, "fin_wait2") == 0 || strcmp(kind, "reset") == 0))
		st = tcp_state(fd);
	(void)outside;
	fid_ready();
	fid_wait();
	/* Untouched: the same state, queues and errors as before. */
	if (st >= 0)
		FID_EXPECT(tcp_state(fd) == st, "TCP state %d, want %d", tcp_state(fd), st);
	if (strcmp(kind, "scm_rights") == 0) {
		char buf[4], cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec io = {buf, sizeof buf};
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		FID_EXPECT(recvmsg(fd, &m, MSG_DONTWAIT) == 1 && CMSG_FIRSTHDR(&m) && CMSG_FIRSTHDR(&m)->cmsg_type == SCM_RIGHTS,
			   "the fd in flight");
	}
	if (strcmp(kind, "pending_error") == 0) {
		int e = 0;
		socklen_t l = sizeof e;
		FID_EXPECT(getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e == ECONNREFUSED, "SO_ERROR %d, want ECONNREFUSED", e);
	}
	if (strcmp(kind, "tcp_acceptq") == 0 || strcmp(kind, "unix_acceptq") == 0 || strcmp(kind, "mptcp_acceptq") == 0)
		FID_EXPECT(accept(fd, NULL, NULL) >= 0, "the queued connection");
	if (strcmp(kind, "mptcp") == 0) {
		char b[4];
		FID_EXPECT(write_all(other, "mptc", 4) == 0 && read_exact(fd, b, 4) == 0 && memcmp(b, "mptc", 4) == 0,
			   "the MPTCP connection carries data");
	}
	if (strcmp(kind, "close_wait") == 0)
		FID_EXPECT(recv(fd, &kind, 1, MSG_DONTWAIT) == 0, "end of file");
	if (strcmp(kind, "unix_external") == 0) {
		char c;
		FID_EXPECT(recv(fd, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "the connection to the outside");
	}
	return fid_done();
}

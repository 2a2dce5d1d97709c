/*
 * fd_memfd_mapped_exec: a memfd holding a script, mapped shared and
 * writable through its own fd and privately through a read-only reopen
 * of it, and run with execveat(AT_EMPTY_PATH). A memfd's own description
 * does not count as a writer, so it can be run while open and mapped
 * for writing; after the restore it must still run (no ETXTBSY), and the
 * shared mapping must still be the memfd's content.
 */
#include "fidelity.h"
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static const char script[] = "#!/bin/true\n";

static int run(int fd)
{
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		char *const av[] = {"true", NULL}, *const ev[] = {NULL};
		syscall(SYS_execveat, fd, "", av, ev, AT_EMPTY_PATH);
		_exit(errno == ETXTBSY ? 3 : 4);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	if (access("/bin/true", X_OK) != 0)
		fid_skip("no /bin/true");
	int fd = memfd_create("script", 0);
	FID_SETUP(fd >= 0 && write(fd, script, sizeof script - 1) == sizeof script - 1, "memfd");
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	int ro = open(path, O_RDONLY);
	FID_SETUP(ro >= 0, "reopen read-only");
	char *priv = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, ro, 0);
	char *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	FID_SETUP(priv != MAP_FAILED && shared != MAP_FAILED, "mmap");
	int rc = run(fd);
	FID_SETUP(rc == 0, "execveat of the memfd before the dump: %d", rc);

	fid_ready();
	fid_wait();

	rc = run(fd);
	FID_EXPECT(rc == 0, "execveat of the memfd: %s", rc == 3 ? "ETXTBSY (a writer holds it)" : "failed");
	FID_EXPECT(memcmp(shared, script, sizeof script - 1) == 0 && memcmp(priv, script, sizeof script - 1) == 0,
		   "mapped content");
	shared[sizeof script - 2] = ' ';
	char c;
	FID_EXPECT(pread(fd, &c, 1, sizeof script - 2) == 1 && c == ' ', "the shared mapping is not the memfd's content");
	return fid_done();
}

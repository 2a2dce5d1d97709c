/*
 * fd_deldirs DIR: a working directory that was removed, a removed
 * directory held open, and a file opened in a directory that was removed
 * since (the file unlinked first). After the restore the working
 * directory is the same deleted directory (nothing can be made in it, its
 * /proc link reads "PATH (deleted)", its mode is the same), the held one
 * likewise, and the file keeps its content and its "PATH (deleted)" name.
 */
#include "fidelity.h"
#include <sys/stat.h>

static void expect_link(const char *link, const char *want)
{
	char target[4200] = {0};
	ssize_t n = readlink(link, target, sizeof target - 1);
	FID_EXPECT(n > 0 && strcmp(target, want) == 0, "%s links to '%s', want '%s'", link, target, want);
}

static void expect_dir(int fd, const char *what, mode_t mode)
{
	struct stat st;
	FID_EXPECT(fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_nlink == 0 && (st.st_mode & 07777) == mode,
		   "%s: mode %#o links %lu, want a deleted directory of mode %#o", what, st.st_mode, (unsigned long)st.st_nlink,
		   mode);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_deldirs LOG DIR");
	char wd[4096], held[4096], gone[4096], file[4200], want[4300], outer[4096], inner[4200];
	snprintf(wd, sizeof wd, "%s/wd", argv[2]);
	snprintf(held, sizeof held, "%s/held", argv[2]);
	snprintf(gone, sizeof gone, "%s/gone", argv[2]);
	snprintf(file, sizeof file, "%s/gone/file", argv[2]);
	snprintf(outer, sizeof outer, "%s/outer", argv[2]);
	snprintf(inner, sizeof inner, "%s/outer/inner", argv[2]);
	FID_SETUP(mkdir(outer, 0755) == 0 && mkdir(inner, 0710) == 0, "mkdir outer/inner");
	int fi = open(inner, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FID_SETUP(fi >= 0 && rmdir(inner) == 0 && rmdir(outer) == 0, "nested");
	FID_SETUP(mkdir(wd, 0751) == 0 && mkdir(held, 0705) == 0 && mkdir(gone, 0700) == 0, "mkdir");
	int fh = open(held, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int ff = open(file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0604);
	FID_SETUP(fh >= 0 && ff >= 0 && write(ff, "in a gone dir", 13) == 13, "open");
	FID_SETUP(chdir(wd) == 0, "chdir");
	FID_SETUP(rmdir(wd) == 0 && rmdir(held) == 0 && unlink(file) == 0 && rmdir(gone) == 0, "remove");

	fid_ready();
	fid_wait();

	char w[4300];
	snprintf(w, sizeof w, "%s (deleted)", wd);
	expect_link("/proc/self/cwd", w);
	int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FID_EXPECT(cwd >= 0, "open .: %s", strerror(errno));
	if (cwd >= 0)
		expect_dir(cwd, "working directory", 0751);
	errno = 0;
	FID_EXPECT(open("new", O_WRONLY | O_CREAT | O_CLOEXEC, 0600) < 0 && errno == ENOENT,
		   "a file could be made in the deleted working directory (%s)", strerror(errno));
	char link[64];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fh);
	snprintf(want, sizeof want, "%s (deleted)", held);
	expect_link(link, want);
	expect_dir(fh, "held directory", 0705);
	snprintf(link, sizeof link, "/proc/self/fd/%d", ff);
	snprintf(want, sizeof want, "%s (deleted)", file);
	expect_link(link, want);
	snprintf(link, sizeof link, "/proc/self/fd/%d", fi);
	snprintf(want, sizeof want, "%s (deleted)", inner);
	expect_link(link, want);
	expect_dir(fi, "held directory in a removed one", 0710);
	struct stat ost;
	FID_EXPECT(stat(outer, &ost) < 0 && errno == ENOENT, "%s exists after the restore", outer);
	char buf[32] = {0};
	FID_EXPECT(pread(ff, buf, sizeof buf - 1, 0) == 13 && strcmp(buf, "in a gone dir") == 0, "file holds '%s'", buf);
	struct stat st;
	FID_EXPECT(fstat(ff, &st) == 0 && (st.st_mode & 07777) == 0604, "file mode %#o", st.st_mode);
	return fid_done();
}

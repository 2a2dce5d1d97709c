/*
 * fd_chroot DIR: a process that changed its root directory (chroot) and
 * works in a directory below it. After the restore its root is the same
 * directory (the same inode as "/"), getcwd says the same path, and the
 * files outside its root are still out of its reach.
 *
 * fd_chroot DIR deleted: the root directory is removed after the chroot;
 * the dump must refuse it by name, and the process goes on as it was.
 */
#include "fidelity.h"
#include <sys/stat.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3 || argc == 4, "usage: fd_chroot LOG DIR [deleted]");
	int deleted = argc == 4 && strcmp(argv[3], "deleted") == 0;
	char jail[4096], sub[4200];
	snprintf(jail, sizeof jail, "%s/jail", argv[2]);
	snprintf(sub, sizeof sub, "%s/jail/sub", argv[2]);
	FID_SETUP(mkdir(jail, 0755) == 0 && mkdir(sub, 0755) == 0, "mkdir");
	struct stat root, wd;
	FID_SETUP(stat(jail, &root) == 0 && stat(sub, &wd) == 0, "stat");
	int parent = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	FID_SETUP(parent >= 0 && chroot(jail) == 0 && chdir("/sub") == 0, "chroot");
	if (deleted) {
		FID_SETUP(chdir("/") == 0 && unlinkat(parent, "jail/sub", AT_REMOVEDIR) == 0 &&
			      unlinkat(parent, "jail", AT_REMOVEDIR) == 0,
			  "remove the root directory");
		wd = root;
	}

	fid_ready();
	fid_wait();

	struct stat st;
	FID_EXPECT(stat("/", &st) == 0 && st.st_ino == root.st_ino && st.st_dev == root.st_dev,
		   "/ is inode %lu, want the chroot directory %lu", (unsigned long)st.st_ino, (unsigned long)root.st_ino);
	FID_EXPECT(stat(".", &st) == 0 && st.st_ino == wd.st_ino, ". is inode %lu, want %lu", (unsigned long)st.st_ino,
		   (unsigned long)wd.st_ino);
	char cwd[4096] = "";
	if (!deleted)
		FID_EXPECT(getcwd(cwd, sizeof cwd) && strcmp(cwd, "/sub") == 0, "getcwd '%s', want /sub", cwd);
	FID_EXPECT(access("/proc/self", F_OK) != 0, "/proc is reachable from inside the chroot");
	return fid_done();
}

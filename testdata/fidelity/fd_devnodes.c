/*
 * fd_devnodes: character device nodes the program made itself.
 *  - a node of /dev/null's device (1:3), mode 0600, owner 1234:5678,
 *    opened twice (two descriptions, one read-only, one write-only at
 *    O_APPEND) and then removed: after the restore both fds are that one
 *    removed node (same inode, no links), with its mode, owner and device,
 *    and still work as the device;
 *  - a node of the console (5:1), kept: the same device after the
 *    restore (one device for everyone, opened again by its path).
 * Run as root. Arguments: DIR/.
 */
#include "fidelity.h"
#include <sys/stat.h>
#include <sys/sysmacros.h>

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc >= 3, "usage: LOG DIR/");
	char null[4096], cons[4096];
	snprintf(null, sizeof null, "%snull", argv[2]);
	snprintf(cons, sizeof cons, "%sconsole", argv[2]);
	FID_SETUP(mknod(null, S_IFCHR | 0600, makedev(1, 3)) == 0, "mknod %s", null);
	FID_SETUP(chown(null, 1234, 5678) == 0, "chown");
	int r = open(null, O_RDONLY), w = open(null, O_WRONLY | O_APPEND);
	FID_SETUP(r >= 0 && w >= 0, "open %s", null);
	FID_SETUP(unlink(null) == 0, "unlink");
	struct stat before;
	FID_SETUP(fstat(r, &before) == 0, "fstat");
	FID_SETUP(mknod(cons, S_IFCHR | 0600, makedev(5, 1)) == 0, "mknod %s", cons);
	int c = open(cons, O_RDONLY | O_NOCTTY);
	if (c < 0)
		fid_skip("cannot open the console here");

	fid_ready();
	fid_wait();

	struct stat sr, sw, sc;
	FID_EXPECT(fstat(r, &sr) == 0 && fstat(w, &sw) == 0 && fstat(c, &sc) == 0, "fstat: %s", strerror(errno));
	FID_EXPECT(sr.st_mode == (S_IFCHR | 0600) && sr.st_rdev == makedev(1, 3), "removed node: mode %#o device %u:%u",
		   sr.st_mode, major(sr.st_rdev), minor(sr.st_rdev));
	FID_EXPECT(sr.st_uid == 1234 && sr.st_gid == 5678, "removed node: owner %d:%d, want 1234:5678", sr.st_uid, sr.st_gid);
	FID_EXPECT(sr.st_nlink == 0, "removed node has %lu links", (unsigned long)sr.st_nlink);
	FID_EXPECT(sr.st_ino == sw.st_ino && sr.st_dev == sw.st_dev, "the two fds of the removed node are different nodes");
	FID_EXPECT((fcntl(w, F_GETFL) & (O_ACCMODE | O_APPEND)) == (O_WRONLY | O_APPEND), "write fd flags %#o", fcntl(w, F_GETFL));
	char b;
	FID_EXPECT(read(r, &b, 1) == 0 && write(w, "x", 1) == 1, "the removed node is no longer /dev/null's device");
	FID_EXPECT(access(null, F_OK) != 0, "%s exists again", null);
	FID_EXPECT(S_ISCHR(sc.st_mode) && sc.st_rdev == makedev(5, 1), "console fd: mode %#o device %u:%u", sc.st_mode,
		   major(sc.st_rdev), minor(sc.st_rdev));
	return fid_done();
}

/*
 * fd_sqlite DIR: sqlite with a write transaction open across the C/R (it
 * holds POSIX locks on the database and has its journal open). After the
 * restore a second writer (the sqlite3 command) is locked out, the
 * restored COMMIT succeeds, and the database holds exactly the committed
 * rows.
 */
#include "fidelity.h"
#include <sqlite3.h>
#include <sys/wait.h>

static sqlite3 *db;

static int exec_sql(const char *sql)
{
	char *err = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK)
		fid_line("sqlite: %s: %s", sql, err ? err : "?");
	sqlite3_free(err);
	return rc;
}

/* sqlite3_cli runs the sqlite3 command on path with sql, its output in
 * out; it returns the exit status (-1 if it could not run). */
static int sqlite3_cli(const char *path, const char *sql, char *out, size_t len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t c = fork();
	if (c == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execlp("sqlite3", "sqlite3", "-cmd", ".timeout 0", path, sql, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	size_t n = 0;
	ssize_t r;
	while (n < len - 1 && (r = read(p[0], out + n, len - 1 - n)) > 0)
		n += r;
	out[n] = 0;
	close(p[0]);
	int st;
	if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	FID_SETUP(argc == 3, "usage: fd_sqlite LOG DIR");
	char path[4096], out[1024];
	snprintf(path, sizeof path, "%s/test.db", argv[2]);
	FID_SETUP(sqlite3_open(path, &db) == SQLITE_OK, "sqlite3_open %.200s", path);
	FID_SETUP(exec_sql("CREATE TABLE t(x INTEGER); INSERT INTO t VALUES(1);") == SQLITE_OK, "create");
	FID_SETUP(exec_sql("BEGIN; INSERT INTO t VALUES(2); UPDATE t SET x = 10 WHERE x = 1;") == SQLITE_OK, "begin");
	/* the transaction's lock shuts out another writer */
	FID_SETUP(sqlite3_cli(path, "INSERT INTO t VALUES(99);", out, sizeof out) != 0 && strstr(out, "locked"),
		  "a second writer got in before the dump: %.200s", out);

	fid_ready();
	fid_wait();

	int st = sqlite3_cli(path, "INSERT INTO t VALUES(99);", out, sizeof out);
	FID_EXPECT(st != 0 && strstr(out, "locked"), "a second writer got in during the restored transaction (exit %d: %s)", st, out);
	st = sqlite3_cli(path, "SELECT group_concat(x) FROM t;", out, sizeof out);
	FID_EXPECT(st == 0 && strcmp(out, "1\n") == 0, "a reader sees %s (exit %d), want the committed row 1 only", out, st);
	FID_EXPECT(exec_sql("COMMIT;") == SQLITE_OK, "the restored COMMIT failed: %s", sqlite3_errmsg(db));
	FID_EXPECT(sqlite3_close(db) == SQLITE_OK, "close");
	st = sqlite3_cli(path, "SELECT group_concat(x) FROM t; PRAGMA integrity_check;", out, sizeof out);
	FID_EXPECT(st == 0 && strcmp(out, "10,2\nok\n") == 0, "after COMMIT the database holds %s (exit %d), want 10,2 and ok", out, st);
	st = sqlite3_cli(path, "INSERT INTO t VALUES(3);", out, sizeof out);
	FID_EXPECT(st == 0, "a writer after the COMMIT failed: %s", out);
	return fid_done();
}

/*
 * say.h: the log of the e2e test programs of this folder. say writes a
 * line to logf; fail adds a reason to why, which the program writes with
 * its FAIL line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static FILE *logf;
static char why[1024];

static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(logf, fmt, ap);
	va_end(ap);
	fputc('\n', logf);
	fflush(logf);
}

static void fail(const char *fmt, ...)
{
	size_t n = strlen(why);
	if (n + 3 >= sizeof why)
		return;
	if (n)
		strcat(why, "; ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why + strlen(why), sizeof why - strlen(why), fmt, ap);
	va_end(ap);
}

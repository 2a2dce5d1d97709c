/*
 * proc_vfork: a parent waiting in vfork() for its child, which runs in the
 * parent's memory and waits for SIGTERM.
 *
 * The case T forks A. A sets its signal mask and signal stack, then, in one
 * asm block, known values in every general-purpose register vfork keeps
 * (rbx, rbp, rsi, rdx, r8-r10, r12-r15, rdi), in xmm8/ymm9 and in the x87
 * control word and MXCSR, and makes the vfork system call. Its child B
 * stores its PID in their shared memory, tells T its PID through a pipe
 * and waits for SIGTERM with raw system calls (it runs on A's stack), then
 * exits. T says "ready": the dump sees A in vfork() (it cannot be stopped),
 * B frozen. After the restore T gets SIGTERM and sends B one; B exits, A's
 * vfork returns B's PID, and A checks, in the same asm block, every
 * register it set, then from C its TSC mode (PR_TSC_SIGSEGV, set before
 * vfork), fs base, signal mask and signal stack, and reports to T through
 * a second pipe.
 */
#include "fidelity.h"

#include <asm/prctl.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static volatile long vchild;
static int tell[2], report[2];

/* child_main runs in B, on A's stack and memory: raw system calls only. */
__attribute__((noreturn, used, force_align_arg_pointer, noinline)) static void child_main(void)
{
	long pid = syscall(SYS_getpid);
	vchild = pid;
	int p32 = (int)pid;
	syscall(SYS_write, tell[1], &p32, sizeof p32);
	uint64_t term = 1ULL << (SIGTERM - 1);
	for (;;) {
		long s = syscall(SYS_rt_sigtimedwait, &term, NULL, NULL, 8);
		if (s == SIGTERM)
			break;
	}
	syscall(SYS_exit, 0);
	for (;;)
		;
}

/* The values A puts in its registers before vfork. */
#define V_RBX 0x1111222233334444ULL
#define V_RBP 0x5555666677778888ULL
#define V_R12 0x0123456789abcdefULL
#define V_R13 0xfedcba9876543210ULL
#define V_R14 0x0f0f0f0f0f0f0f0fULL
#define V_R15 0xf0f0f0f0f0f0f0f0ULL
#define V_RSI 0x1234000012340000ULL
#define V_RDX 0x0000567800005678ULL
#define V_R8 0x8888000000000008ULL
#define V_R9 0x9999000000000009ULL
#define V_R10 0xaaaa00000000000aULL
#define V_MXCSR 0x7f80u /* round toward zero, every exception masked */
#define V_FCW 0x027fu   /* double precision */

/* regs receives, after vfork returned in A: rbx rbp r12 r13 r14 r15 rsi
 * rdx r8 r9 r10 rdi mxcsr fcw xmm8 (2 words) ymm9 (4 words). */
struct after {
	uint64_t gpr[12];
	uint32_t mxcsr;
	uint16_t fcw, pad;
	uint64_t xmm8[2];
	uint64_t ymm9[4];
};

static const uint64_t xmm8v[2] = {0x1122334455667788ULL, 0x99aabbccddeeff00ULL};
static const uint64_t ymm9v[4] = {0x0101010101010101ULL, 0x0202020202020202ULL, 0x0303030303030303ULL, 0x0404040404040404ULL};

static long vfork_regs(struct after *a)
{
	long ret;
	uint32_t mx = V_MXCSR;
	uint16_t cw = V_FCW;
	__asm__ volatile(
		"push %%rbx\n\tpush %%rbp\n\tpush %%r12\n\tpush %%r13\n\tpush %%r14\n\tpush %%r15\n\t"
		"sub $16, %%rsp\n\t"
		"stmxcsr 8(%%rsp)\n\tfnstcw 12(%%rsp)\n\t"
		"ldmxcsr (%[mx])\n\tfldcw (%[cw])\n\t"
		"movdqu (%[x8]), %%xmm8\n\tvmovdqu (%[y9]), %%ymm9\n\t"
		"movabs $0x1111222233334444, %%rbx\n\t"
		"movabs $0x5555666677778888, %%rbp\n\t"
		"movabs $0x0123456789abcdef, %%r12\n\t"
		"movabs $0xfedcba9876543210, %%r13\n\t"
		"movabs $0x0f0f0f0f0f0f0f0f, %%r14\n\t"
		"movabs $0xf0f0f0f0f0f0f0f0, %%r15\n\t"
		"movabs $0x1234000012340000, %%rsi\n\t"
		"movabs $0x0000567800005678, %%rdx\n\t"
		"movabs $0x8888000000000008, %%r8\n\t"
		"movabs $0x9999000000000009, %%r9\n\t"
		"movabs $0xaaaa00000000000a, %%r10\n\t"
		"mov $58, %%eax\n\t"
		"syscall\n\t"
		"test %%rax, %%rax\n\t"
		"jnz 1f\n\t"
		"and $-16, %%rsp\n\t"
		"call child_main\n"
		"1:\n\t"
		"mov %%rbx, 0(%%rdi)\n\tmov %%rbp, 8(%%rdi)\n\tmov %%r12, 16(%%rdi)\n\tmov %%r13, 24(%%rdi)\n\t"
		"mov %%r14, 32(%%rdi)\n\tmov %%r15, 40(%%rdi)\n\tmov %%rsi, 48(%%rdi)\n\tmov %%rdx, 56(%%rdi)\n\t"
		"mov %%r8, 64(%%rdi)\n\tmov %%r9, 72(%%rdi)\n\tmov %%r10, 80(%%rdi)\n\tmov %%rdi, 88(%%rdi)\n\t"
		"stmxcsr 96(%%rdi)\n\tfnstcw 100(%%rdi)\n\t"
		"movdqu %%xmm8, 104(%%rdi)\n\tvmovdqu %%ymm9, 120(%%rdi)\n\t"
		"vzeroupper\n\t"
		"ldmxcsr 8(%%rsp)\n\tfldcw 12(%%rsp)\n\t"
		"add $16, %%rsp\n\t"
		"pop %%r15\n\tpop %%r14\n\tpop %%r13\n\tpop %%r12\n\tpop %%rbp\n\tpop %%rbx\n\t"
		: "=a"(ret)
		: "D"(a), [mx] "c"(&mx), [cw] "r"(&cw), [x8] "r"(xmm8v), [y9] "r"(ymm9v)
		: "rsi", "rdx", "r8", "r9", "r10", "r11", "xmm8", "xmm9", "memory", "cc");
	return ret;
}

static void run_a(void)
{
	char why[1024] = "";
	size_t n = 0;
#define A_EXPECT(cond, ...)                                                \
	do {                                                               \
		if (!(cond) && n < sizeof why - 128) {                     \
			if (n)                                             \
				n += snprintf(why + n, sizeof why - n, "; ");  \
			n += snprintf(why + n, sizeof why - n, __VA_ARGS__); \
		}                                                          \
	} while (0)
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGUSR2);
	sigaddset(&mask, SIGWINCH);
	FID_SETUP(sigprocmask(SIG_SETMASK, &mask, NULL) == 0, "sigprocmask");
	static char altstack[65536];
	stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
	FID_SETUP(sigaltstack(&ss, NULL) == 0, "sigaltstack");
	unsigned long fs0 = 0;
	FID_SETUP(syscall(SYS_arch_prctl, ARCH_GET_FS, &fs0) == 0, "arch_prctl");
	/* rdtsc faults from here (the child inherits it): nothing below reads
	 * the time until the mode is checked and set back. */
	FID_SETUP(prctl(PR_SET_TSC, PR_TSC_SIGSEGV) == 0, "prctl(PR_SET_TSC)");
	struct after a;
	memset(&a, 0, sizeof a);
	long pid = vfork_regs(&a);
	int tsc = 0;
	prctl(PR_GET_TSC, &tsc);
	prctl(PR_SET_TSC, PR_TSC_ENABLE);
	A_EXPECT(tsc == PR_TSC_SIGSEGV, "TSC mode %d, want PR_TSC_SIGSEGV", tsc);
	A_EXPECT(pid == vchild && pid > 0, "vfork returned %ld, the child is %ld", pid, vchild);
	const uint64_t want[12] = {V_RBX, V_RBP, V_R12, V_R13, V_R14, V_R15, V_RSI, V_RDX, V_R8, V_R9, V_R10, (uint64_t)&a};
	const char *names[12] = {"rbx", "rbp", "r12", "r13", "r14", "r15", "rsi", "rdx", "r8", "r9", "r10", "rdi"};
	for (int i = 0; i < 12; i++)
		A_EXPECT(a.gpr[i] == want[i], "%s %#llx, want %#llx", names[i], (unsigned long long)a.gpr[i], (unsigned long long)want[i]);
	A_EXPECT(a.mxcsr == V_MXCSR, "mxcsr %#x, want %#x", a.mxcsr, V_MXCSR);
	A_EXPECT(a.fcw == V_FCW, "fcw %#x, want %#x", a.fcw, V_FCW);
	A_EXPECT(memcmp(a.xmm8, xmm8v, sizeof xmm8v) == 0, "xmm8 %#llx %#llx", (unsigned long long)a.xmm8[0], (unsigned long long)a.xmm8[1]);
	A_EXPECT(memcmp(a.ymm9, ymm9v, sizeof ymm9v) == 0, "ymm9 %#llx %#llx %#llx %#llx", (unsigned long long)a.ymm9[0],
		 (unsigned long long)a.ymm9[1], (unsigned long long)a.ymm9[2], (unsigned long long)a.ymm9[3]);
	unsigned long fs1 = 0;
	syscall(SYS_arch_prctl, ARCH_GET_FS, &fs1);
	A_EXPECT(fs1 == fs0, "fs base %#lx, want %#lx", fs1, fs0);
	sigset_t now;
	sigprocmask(SIG_SETMASK, NULL, &now);
	A_EXPECT(sigismember(&now, SIGUSR2) && sigismember(&now, SIGWINCH) && sigismember(&now, SIGTERM) && !sigismember(&now, SIGUSR1),
		 "signal mask changed");
	stack_t cur;
	sigaltstack(NULL, &cur);
	A_EXPECT(cur.ss_sp == altstack && cur.ss_size == sizeof altstack && cur.ss_flags == 0, "sigaltstack %p/%zu/%d", cur.ss_sp,
		 cur.ss_size, cur.ss_flags);
	int st = 0;
	A_EXPECT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the vfork child's status %#x", st);
	if (!n)
		snprintf(why, sizeof why, "ok");
	ssize_t w = write(report[1], why, strlen(why));
	(void)w;
	_exit(0);
}

int main(int argc, char **argv)
{
	fid_init(argc, argv);
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx"))
		fid_skip("no AVX");
	FID_SETUP(pipe(tell) == 0 && pipe(report) == 0, "pipe");
	pid_t a = fork();
	FID_SETUP(a >= 0, "fork");
	if (a == 0)
		run_a();
	int b = 0;
	FID_SETUP(read(tell[0], &b, sizeof b) == sizeof b && b > 0, "read the vfork child's pid");
	fid_ready();
	fid_wait();
	FID_EXPECT(kill(b, SIGTERM) == 0, "kill the vfork child %d: %s", b, strerror(errno));
	char buf[1100] = "";
	ssize_t r = read(report[0], buf, sizeof buf - 1);
	FID_EXPECT(r > 0, "no report from the vfork parent %d", a);
	if (r > 0) {
		buf[r] = 0;
		FID_EXPECT(strcmp(buf, "ok") == 0, "vfork parent: %s", buf);
	}
	int st;
	FID_EXPECT(waitpid(a, &st, 0) == a && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the vfork parent's status %#x", st);
	return fid_done();
}

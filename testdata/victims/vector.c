/*
 * vector: registers in the middle of pure computation (usage: vector LOG).
 *
 * Each tick runs a burst of ~50-100 ms with no system call: inline asm
 * loads known values into ymm8-ymm15 and r12-r15, runs BURST iterations of
 * integer, permute and float ops on them, and stores them; the result must
 * equal what plain C computed once at start. A checkpoint almost always
 * lands inside a burst, so a register lost or altered by dump/restore
 * makes that burst write "check FAIL vector ..." at once.
 * MXCSR is set to round-toward-zero + flush-to-zero + denormals-are-zero
 * (0xffc0) at start and checked at every tick ("check FAIL mxcsr").
 * If cpuid reports AVX-512F, each tick also runs a short burst on
 * zmm16/zmm17 and mask k1 (never on a machine without it).
 * The log is opened O_WRONLY|O_TRUNC; signals follow victim.h.
 */
#include "victim.h"
#include <immintrin.h>

#define BURST 24000000UL /* iterations per burst */
#define MXCSR 0xffc0u    /* default 0x1f80 + RZ (0x6000) + FTZ (0x8000) + DAZ (0x40) */

/* vstate is what one burst starts from and ends with. */
struct vstate {
	uint32_t y8[8];  /* += y9 */
	uint32_t y9[8];  /* constant */
	uint32_t y10[8]; /* ^= y8 */
	uint32_t y11[8]; /* permuted by y12 */
	uint32_t y12[8]; /* constant permutation: rotate by one lane */
	float y13[8];    /* = y13 * y14 + y15, rounded twice */
	float y14[8];    /* constant */
	float y15[8];    /* constant */
	uint64_t r12, r13, r14, r15; /* r12 += r13; r14 ^= r12; r15 = rol(r15, 1) + r14 */
} __attribute__((aligned(32)));

static struct vstate start_state, want;

static void burst(const struct vstate *in, struct vstate *out)
{
	unsigned long n = BURST;
	__asm__ volatile(
		"vmovdqu 0(%[in]), %%ymm8\n\t"
		"vmovdqu 32(%[in]), %%ymm9\n\t"
		"vmovdqu 64(%[in]), %%ymm10\n\t"
		"vmovdqu 96(%[in]), %%ymm11\n\t"
		"vmovdqu 128(%[in]), %%ymm12\n\t"
		"vmovdqu 160(%[in]), %%ymm13\n\t"
		"vmovdqu 192(%[in]), %%ymm14\n\t"
		"vmovdqu 224(%[in]), %%ymm15\n\t"
		"mov 256(%[in]), %%r12\n\t"
		"mov 264(%[in]), %%r13\n\t"
		"mov 272(%[in]), %%r14\n\t"
		"mov 280(%[in]), %%r15\n"
		"1:\n\t"
		"vpaddd %%ymm9, %%ymm8, %%ymm8\n\t"
		"vpxor %%ymm8, %%ymm10, %%ymm10\n\t"
		"vpermd %%ymm11, %%ymm12, %%ymm11\n\t"
		"vmulps %%ymm14, %%ymm13, %%ymm13\n\t"
		"vaddps %%ymm15, %%ymm13, %%ymm13\n\t"
		"add %%r13, %%r12\n\t"
		"xor %%r12, %%r14\n\t"
		"rol $1, %%r15\n\t"
		"add %%r14, %%r15\n\t"
		"dec %[n]\n\t"
		"jnz 1b\n\t"
		"vmovdqu %%ymm8, 0(%[out])\n\t"
		"vmovdqu %%ymm9, 32(%[out])\n\t"
		"vmovdqu %%ymm10, 64(%[out])\n\t"
		"vmovdqu %%ymm11, 96(%[out])\n\t"
		"vmovdqu %%ymm12, 128(%[out])\n\t"
		"vmovdqu %%ymm13, 160(%[out])\n\t"
		"vmovdqu %%ymm14, 192(%[out])\n\t"
		"vmovdqu %%ymm15, 224(%[out])\n\t"
		"mov %%r12, 256(%[out])\n\t"
		"mov %%r13, 264(%[out])\n\t"
		"mov %%r14, 272(%[out])\n\t"
		"mov %%r15, 280(%[out])\n\t"
		"vzeroupper"
		: [n] "+r"(n)
		: [in] "r"(in), [out] "r"(out)
		: "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
		  "r12", "r13", "r14", "r15", "memory", "cc");
}

/* simulate computes in plain C what burst computes. */
static void simulate(const struct vstate *in, struct vstate *o)
{
	*o = *in;
	for (unsigned long k = 0; k < BURST; k++) {
		uint32_t old11[8];
		memcpy(old11, o->y11, sizeof old11);
		for (int i = 0; i < 8; i++) {
			o->y8[i] += o->y9[i];
			o->y10[i] ^= o->y8[i];
			o->y11[i] = old11[o->y12[i] & 7];
			o->y13[i] = o->y13[i] * o->y14[i];
			o->y13[i] = o->y13[i] + o->y15[i];
		}
		o->r12 += o->r13;
		o->r14 ^= o->r12;
		o->r15 = ((o->r15 << 1) | (o->r15 >> 63)) + o->r14;
	}
}

/* diff names the first field where a and b differ. */
static const char *diff(const struct vstate *a, const struct vstate *b)
{
	static const char *names[] = {"ymm8", "ymm9", "ymm10", "ymm11", "ymm12", "ymm13", "ymm14", "ymm15"};
	for (int r = 0; r < 8; r++)
		if (memcmp((const char *)a + 32 * r, (const char *)b + 32 * r, 32) != 0)
			return names[r];
	if (a->r12 != b->r12 || a->r13 != b->r13)
		return "r12/r13";
	if (a->r14 != b->r14 || a->r15 != b->r15)
		return "r14/r15";
	return NULL;
}

/* burst512 keeps zmm16 (masked adds of zmm17 under k1) through a loop.
 * Only called if the CPU has AVX-512F. Returns 0 if the result is right. */
__attribute__((target("avx512f"))) static int burst512(void)
{
	uint32_t in[32] __attribute__((aligned(64))), out[16] __attribute__((aligned(64)));
	unsigned long n = BURST / 4;
	unsigned int k = 0xa5c3, kout = 0;
	for (int i = 0; i < 32; i++)
		in[i] = mix64(i) & 0xffffff;
	__asm__ volatile(
		"vmovdqu32 0(%[in]), %%zmm16\n\t"
		"vmovdqu32 64(%[in]), %%zmm17\n\t"
		"kmovw %[k], %%k1\n"
		"1:\n\t"
		"vpaddd %%zmm17, %%zmm16, %%zmm16%{%%k1%}\n\t"
		"dec %[n]\n\t"
		"jnz 1b\n\t"
		"vmovdqu32 %%zmm16, 0(%[out])\n\t"
		"kmovw %%k1, %[kout]\n\t"
		"vzeroupper"
		: [n] "+r"(n), [kout] "=r"(kout)
		: [in] "r"(in), [out] "r"(out), [k] "r"(k)
		: "xmm16", "xmm17", "k1", "memory", "cc");
	for (int i = 0; i < 16; i++)
		if (out[i] != ((k >> i) & 1 ? in[i] + (uint32_t)(BURST / 4) * in[16 + i] : in[i]))
			return -1;
	return kout == k ? 0 : -1;
}

static int check(char *why, size_t len)
{
	unsigned int csr = _mm_getcsr() & ~0x3fu; /* without exception flags */
	if (csr != MXCSR)
		return snprintf(why, len, "mxcsr %#x, want %#x", csr, MXCSR), -1;
	return 0;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	char why[256], extra[64];

	__builtin_cpu_init();
	int avx512 = __builtin_cpu_supports("avx512f");
	snprintf(extra, sizeof extra, "avx512=%d", avx512);
	victim_start(argc, argv, 1, "LOG", O_WRONLY | O_CREAT | O_TRUNC, extra);
	_mm_setcsr(MXCSR);

	for (int i = 0; i < 8; i++) {
		start_state.y8[i] = mix64(i);
		start_state.y9[i] = mix64(100 + i) | 1;
		start_state.y10[i] = mix64(200 + i);
		start_state.y11[i] = mix64(300 + i);
		start_state.y12[i] = (i + 1) % 8;
		start_state.y13[i] = 1000.0f + 333.3f * i;
		start_state.y14[i] = 0.9999f - 0.00001f * i;
		start_state.y15[i] = 0.1f + 0.037f * i;
	}
	start_state.r12 = 0x1212121212121212ULL;
	start_state.r13 = 0x1313131313131313ULL;
	start_state.r14 = 0x1414141414141414ULL;
	start_state.r15 = 0x1515151515151515ULL;
	simulate(&start_state, &want);

	for (;;) {
		struct vstate got;
		double t0 = now_ms();
		burst(&start_state, &got);
		double ms = now_ms() - t0;
		const char *bad = diff(&got, &want);
		if (bad)
			vlog("check FAIL vector %s after burst %lu", bad, ticks + 1);
		if (avx512 && burst512() < 0)
			vlog("check FAIL vector avx512 after burst %lu", ticks + 1);
		if (check(why, sizeof why) < 0)
			vlog("check FAIL %s", why);
		ticks++;
		vlog("tick %lu burst_ms=%.1f", ticks, ms);
		victim_poll(check);
	}
}

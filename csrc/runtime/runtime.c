/* runtime.c: thread count, instruction-set dispatch and per-thread scratch. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "bc_core.h"
#include "bc_rt.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if !defined(_WIN32)
#include <pthread.h>
#define BC_HAVE_PTHREAD 1
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BC_X86 1
#endif

/* Atomic int accesses: GCC/clang builtins; elsewhere (MSVC) aligned int
 * accesses are atomic already, and the only race (two threads reading the
 * environment at once) stores the same value twice. */
#if defined(__GNUC__) || defined(__clang__)
#define BC_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define BC_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define BC_INIT_ONCE(p, v)                                                               \
    do {                                                                                 \
        int unset_ = -1;                                                                 \
        __atomic_compare_exchange_n((p), &unset_, (v), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE); \
    } while (0)
#define BC_TLS _Thread_local
#else
#define BC_LOAD(p) (*(volatile int *)(p))
#define BC_STORE(p, v) (*(volatile int *)(p) = (v))
#define BC_INIT_ONCE(p, v)          \
    do {                            \
        if (BC_LOAD(p) < 0)         \
            BC_STORE((p), (v));     \
    } while (0)
#define BC_TLS __declspec(thread)
#endif

/* ---- instruction set ---------------------------------------------------- */

static int g_isa = -1;      /* forced or detected; -1 until the first call */
static int g_best = -1;

static int detect_best(void)
{
#ifdef BC_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2")
        && __builtin_cpu_supports("fma"))
        return BC_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return BC_ISA_AVX2;
#endif
    return BC_ISA_GENERIC;
}

static int isa_from_env(int best)
{
    const char *s = getenv("BLOCKC_ISA");
    int want = best;
    if (s && *s) {
        if (!strcmp(s, "generic")) want = BC_ISA_GENERIC;
        else if (!strcmp(s, "avx2")) want = BC_ISA_AVX2;
        else if (!strcmp(s, "avx512")) want = BC_ISA_AVX512;
    }
    return want <= best ? want : best;  /* never more than the CPU has */
}

static void isa_init(void)
{
    int best = BC_LOAD(&g_best);
    if (best < 0) {
        best = detect_best();
        BC_STORE(&g_best, best);
    }
    BC_INIT_ONCE(&g_isa, isa_from_env(best));
}

int bc_rt_isa(void)
{
    int isa = BC_LOAD(&g_isa);
    if (isa < 0) {
        isa_init();
        isa = BC_LOAD(&g_isa);
    }
    return isa;
}

int bc_best_isa(int *isa)
{
    if (!isa)
        return BC_ENULL;
    bc_rt_isa();
    *isa = BC_LOAD(&g_best);
    return BC_OK;
}

int bc_get_isa(int *isa)
{
    if (!isa)
        return BC_ENULL;
    *isa = bc_rt_isa();
    return BC_OK;
}

int bc_set_isa(int isa)
{
    bc_rt_isa();
    if (isa < BC_ISA_GENERIC || isa > BC_ISA_AVX512
        || isa > BC_LOAD(&g_best))
        return BC_EOPTION;
    BC_STORE(&g_isa, isa);
    return BC_OK;
}

/* ---- threads ------------------------------------------------------------ */

static int g_threads = -1;  /* -1: not read yet; 0: OpenMP default; n: forced */

static int threads_setting(void)
{
    int t = BC_LOAD(&g_threads);
    if (t < 0) {
        const char *s = getenv("BLOCKC_NUM_THREADS");
        int v = 0;
        if (s && *s) {
            char *end;
            long l = strtol(s, &end, 10);
            if (*end == '\0' && l > 0 && l <= 4096)
                v = (int)l;
        }
        BC_INIT_ONCE(&g_threads, v);
        t = BC_LOAD(&g_threads);
    }
    return t;
}

static int threads_now(void)
{
#ifdef _OPENMP
    int t = threads_setting();
    if (t == 0)
        t = omp_get_max_threads();
    return t > 0 ? t : 1;
#else
    return 1;
#endif
}

int bc_set_num_threads(int n)
{
    if (n < 0 || n > 4096)  /* as BLOCKC_NUM_THREADS: OpenMP cannot start ~10^5 threads */
        return BC_ESIZE;
    threads_setting();  /* read the environment first, so it cannot override n later */
    if (n == 0) {
        const char *s = getenv("BLOCKC_NUM_THREADS");
        long l = 0;
        if (s && *s) {
            char *end;
            l = strtol(s, &end, 10);
            if (*end != '\0' || l <= 0 || l > 4096)
                l = 0;
        }
        n = (int)l;
    }
    BC_STORE(&g_threads, n);
    return BC_OK;
}

int bc_get_num_threads(int *n)
{
    if (!n)
        return BC_ENULL;
    *n = threads_now();
    return BC_OK;
}

/* Below this many flops a parallel region costs more than it saves. */
#define BC_PAR_MIN_FLOPS 2.0e6

int bc_rt_threads(double flops)
{
    if (flops < BC_PAR_MIN_FLOPS)
        return 1;
#ifdef _OPENMP
    if (omp_in_parallel())
        return 1;  /* called from inside someone's parallel region: stay serial */
#endif
    return threads_now();
}

/* ---- per-thread scratch ------------------------------------------------- */

#define BC_SLOTS 2

typedef struct {
    float *p[BC_SLOTS];
    size_t n[BC_SLOTS];
} scratch_t;

static BC_TLS scratch_t t_scratch;

#ifdef BC_HAVE_PTHREAD
static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *arg)
{
    scratch_t *s = arg;
    for (int i = 0; i < BC_SLOTS; i++) {
        free(s->p[i]);
        s->p[i] = NULL;
        s->n[i] = 0;
    }
}

static void key_init(void) { (void)pthread_key_create(&g_key, scratch_free); }
#endif

static void *alloc64(size_t bytes)
{
#if defined(_WIN32)
    return _aligned_malloc(bytes, 64);
#else
    void *p = NULL;
    return posix_memalign(&p, 64, bytes) == 0 ? p : NULL;
#endif
}

float *bc_rt_scratch(int slot, size_t n)
{
    scratch_t *s = &t_scratch;
    if (slot < 0 || slot >= BC_SLOTS)
        return NULL;
    if (s->n[slot] >= n && s->p[slot])
        return s->p[slot];
    if (n > SIZE_MAX / sizeof(float) - 16)
        return NULL;
    size_t want = n + n / 4 + 16;  /* some headroom against regrowing */
    float *p = alloc64(want * sizeof(float));
    if (!p)
        return NULL;
#if defined(_WIN32)
    _aligned_free(s->p[slot]);
#else
    free(s->p[slot]);
#endif
    s->p[slot] = p;
    s->n[slot] = want;
#ifdef BC_HAVE_PTHREAD
    pthread_once(&g_key_once, key_init);
    pthread_setspecific(g_key, s);  /* frees the buffers at thread exit */
#endif
    return p;
}

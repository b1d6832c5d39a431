/* runtime.c: the thread count, the kernels' aligned memory and per-call
 * contexts (the instruction set's table from isa.c or tune.c). */
#if defined(__linux__)
#define _GNU_SOURCE  /* sched_getaffinity */
#else
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "bc_core.h"
#include "bc_atomic.h"
#include "bc_rt.h"

#if !defined(_WIN32)
#include <pthread.h>
#include <unistd.h>
#define BC_HAVE_PTHREAD 1
#endif
#if defined(__linux__)
#include <sched.h>
#include <sys/mman.h>  /* madvise */
#endif

/* ---- threads ------------------------------------------------------------ */

/* The most threads anyone may ask for (BLOCKC_NUM_THREADS, bc_set_num_threads). */
#define BC_MAX_THREADS 4096

static int g_threads = -1;  /* -1: not read yet; 0: the default; n: forced */
static int g_forked = 0;    /* 1 in a child forked after the parent used blockc */

/* Environment variable var as a count in [1, BC_MAX_THREADS], or 0 (unset or invalid). */
static int env_count(const char *var)
{
    const char *s = getenv(var);
    if (!s || !*s)
        return 0;
    char *end;
    const long l = strtol(s, &end, 10);
    return *end == '\0' && l > 0 && l <= BC_MAX_THREADS ? (int)l : 0;
}

static int env_threads(void) { return env_count("BLOCKC_NUM_THREADS"); }

static int threads_setting(void)
{
    int t = BC_LOAD(&g_threads);
    if (t < 0) {
        BC_INIT_ONCE(&g_threads, env_threads());
        t = BC_LOAD(&g_threads);
    }
    return t;
}

/* The processors this process may run on (its affinity mask where the system
 * has one), read once: it may be a system call. */
static int g_procs = -1;

static int procs_now(void)
{
    int procs = BC_LOAD(&g_procs);
    if (procs < 0) {
        int p = 1;
#if defined(__linux__) && defined(CPU_COUNT)
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            p = CPU_COUNT(&set);
#elif defined(BC_HAVE_PTHREAD) && defined(_SC_NPROCESSORS_ONLN)
        p = (int)sysconf(_SC_NPROCESSORS_ONLN);
#endif
        BC_INIT_ONCE(&g_procs, p < 1 ? 1 : p > BC_MAX_THREADS ? BC_MAX_THREADS : p);
        procs = BC_LOAD(&g_procs);
    }
    return procs;
}

/* The default without BLOCKC_NUM_THREADS: OMP_NUM_THREADS if set (the usual way
 * to ask numerical libraries for fewer threads), else the processors; never
 * more than the processors, so a huge value asks for nothing impossible. */
static int default_threads(void)
{
    const int procs = procs_now(), want = env_count("OMP_NUM_THREADS");
    return want && want < procs ? want : procs;
}

static int threads_now(void)
{
    if (BC_LOAD(&g_forked))
        return 1;
    const int t = threads_setting();
    return t > 0 ? t : default_threads();
}

#ifdef BC_HAVE_PTHREAD
/* A child forked after the parent started the pool has none of its helpers:
 * the child runs blockc on one thread (the calling one). */
static void at_fork_child(void)
{
    BC_STORE(&g_forked, 1);
    bc_rt_pool_forked();
}
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void fork_init(void) { (void)pthread_atfork(NULL, NULL, at_fork_child); }
#endif

int bc_set_num_threads(int n)
{
    if (n < 0 || n > BC_MAX_THREADS)
        return BC_ESIZE;
    threads_setting();  /* read the environment first, so it cannot override n later */
    BC_STORE(&g_threads, n ? n : env_threads());
    return BC_OK;
}

int bc_get_num_threads(int *n)
{
    if (!n)
        return BC_ENULL;
    *n = threads_now();
    return BC_OK;
}

/* Below this much work a second thread costs more than it saves: about 2 Mflop
 * of arithmetic, or a quarter of a megabyte of weights streamed from memory. */
#define BC_PAR_MIN_FLOPS 2.0e6
#define BC_PAR_MIN_BYTES 262144.0

int bc_rt_threads(const bc_ctx *cx, double flops, double bytes)
{
    if ((flops < BC_PAR_MIN_FLOPS && bytes < BC_PAR_MIN_BYTES) || cx->threads <= 1)
        return 1;
    return cx->threads;
}

typedef struct {
    bc_row_fn fn;
    const void *arg;
    size_t rows, per;   /* rows in all, rows per unit */
} rows_job;

static void rows_unit(const void *arg, size_t u, int t)
{
    (void)t;
    const rows_job *j = arg;
    const size_t i1 = (u + 1) * j->per < j->rows ? (u + 1) * j->per : j->rows;
    for (size_t i = u * j->per; i < i1; i++)
        j->fn(j->arg, i);
}

void bc_rt_rows(int threads, size_t rows, bc_row_fn fn, const void *arg)
{
    if (threads <= 1) {
        for (size_t i = 0; i < rows; i++)
            fn(arg, i);
        return;
    }
    const size_t want = 4 * (size_t)threads, per = (rows + want - 1) / want;
    const rows_job j = {fn, arg, rows, per};
    bc_rt_run(threads, (rows + per - 1) / per, rows_unit, &j);
}

/* ---- per-thread scratch ------------------------------------------------- */

typedef struct {
    float *p;
    size_t n;
} scratch_t;

/* the kernels' scratch; a prompt's quantised rows; a prompt's expanded weights */
static BC_TLS scratch_t t_scratch, t_xq, t_wx;

#ifdef BC_HAVE_PTHREAD
static pthread_key_t g_key, g_xq_key, g_wx_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *arg)
{
    scratch_t *s = arg;
    bc_rt_free64(s->p);
    s->p = NULL;
    s->n = 0;
}

static void key_init(void)
{
    (void)pthread_key_create(&g_key, scratch_free);
    (void)pthread_key_create(&g_xq_key, scratch_free);
    (void)pthread_key_create(&g_wx_key, scratch_free);
}
#endif

void *bc_rt_alloc64(size_t bytes)
{
#if defined(_WIN32)
    return _aligned_malloc(bytes, 64);
#else
    void *p = NULL;
    return posix_memalign(&p, 64, bytes) == 0 ? p : NULL;
#endif
}

void bc_rt_free64(void *p)
{
#if defined(_WIN32)
    _aligned_free(p);
#else
    free(p);
#endif
}

int bc_advise_small_pages(void *p, size_t bytes)
{
    if (!p && bytes)
        return BC_ENULL;
#if defined(__linux__) && defined(MADV_NOHUGEPAGE)
    const long page_l = sysconf(_SC_PAGESIZE);
    const uintptr_t page = page_l > 0 ? (uintptr_t)page_l : 4096u;
    const uintptr_t a = (uintptr_t)p;
    if (bytes > UINTPTR_MAX - a)
        return BC_EOVERFLOW;
    const uintptr_t lo = (a + page - 1) / page * page, hi = (a + bytes) / page * page;
    if (hi > lo)
        (void)madvise((void *)lo, (size_t)(hi - lo), MADV_NOHUGEPAGE);  /* advice: a refusal is not an error */
#endif
    return BC_OK;
}

/* The calling thread's buffer s (t_scratch, t_xq or t_wx), at least n floats, or NULL. */
static float *buffer_get(scratch_t *s, size_t n)
{
    if (s->n >= n && s->p)
        return s->p;
    if (n > SIZE_MAX / sizeof(float) / 2)
        return NULL;
    const size_t want = n + n / 4 + 16;  /* some headroom against regrowing */
    float *p = bc_rt_alloc64(want * sizeof(float));
    if (!p)
        return NULL;
    bc_rt_free64(s->p);
    s->p = p;
    s->n = want;
#ifdef BC_HAVE_PTHREAD
    pthread_once(&g_key_once, key_init);
    /* frees the buffer at thread exit */
    pthread_setspecific(s == &t_xq ? g_xq_key : s == &t_wx ? g_wx_key : g_key, s);
#endif
    return p;
}

static float *scratch_get(size_t n) { return buffer_get(&t_scratch, n); }

void *bc_rt_xq_buffer(size_t bytes)
{
    return buffer_get(&t_xq, bytes / sizeof(float) + 1);
}

void *bc_rt_wx_buffer(size_t bytes)
{
    if (bytes > BC_RT_WX_MAX)
        return NULL;
    return buffer_get(&t_wx, bytes / sizeof(float) + 1);
}

int bc_rt_ctx(bc_ctx *cx, size_t d_head)
{
#ifdef BC_HAVE_PTHREAD
    pthread_once(&g_fork_once, fork_init);
#endif
    const int isa = bc_rt_forced_isa();
    const bc_kernel_table *kt = isa < 0 ? bc_rt_auto_table() : bc_rt_table_of(isa);
    const int threads = threads_now();
    size_t per = BC_GEMM_SCRATCH;
    if (d_head) {
        if (d_head > (size_t)BC_MAX_ELEMENTS)
            return BC_EOVERFLOW;
        const size_t a = kt->attn_scratch(d_head), ab = kt->attn_bwd_scratch(d_head);
        if (a > per)
            per = a;
        if (ab > per)
            per = ab;
    }
    per = (per + 15) & ~(size_t)15;  /* every slice 64-byte aligned */
    if (per > SIZE_MAX / sizeof(float) / 4 / (size_t)threads)
        return BC_ENOMEM;
    float *p = scratch_get(per * (size_t)threads);
    if (!p)
        return BC_ENOMEM;
    cx->kt = kt;
    cx->threads = threads;
    cx->scratch = p;
    cx->per_thread = per;
    return BC_OK;
}

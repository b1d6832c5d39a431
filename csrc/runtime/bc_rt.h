/* bc_rt.h: internal runtime services for the kernels (not public).
 *
 * Every entry point that runs fast kernels first takes a context: the kernel
 * table (instruction set) and the thread cap in force at that moment, and
 * scratch for every thread it may use. All of one call then runs on what the
 * context holds, whatever another thread sets meanwhile (bc_set_isa,
 * bc_set_num_threads), and the only allocation a kernel call makes, the
 * scratch, fails before anything is written: as BC_ENOMEM from the entry point.
 */
#ifndef BC_RT_H
#define BC_RT_H

#include <stddef.h>
#include "bc_runtime.h"
#include "bc_dispatch.h"

typedef struct {
    const bc_kernel_table *kt;  /* the instruction set of this call */
    int threads;                /* the most threads a kernel of this call may use, >= 1 */
    float *scratch;             /* threads slices of per_thread floats, 64-byte aligned */
    size_t per_thread;
} bc_ctx;

/* A context for one call on the calling thread, with scratch for the GEMM and
 * for attention over heads of up to d_head floats (0: no attention). The
 * scratch belongs to the calling thread, is grown when needed and kept (freed
 * when the thread exits). BC_OK, or BC_ENOMEM when it cannot be had. */
int bc_rt_ctx(bc_ctx *cx, size_t d_head);

/* Threads for a job of `flops` floating-point operations streaming `bytes` of
 * memory: 1 when the job is too small to pay for waking a helper, else the
 * context's count. */
int bc_rt_threads(const bc_ctx *cx, double flops, double bytes);

/* The calling thread's buffer for a prompt's quantised rows (linear.c), at
 * least bytes, 64-byte aligned, or NULL: its own, apart from the scratch (a
 * context's scratch stays where it is), grown when needed and kept (freed at
 * thread exit). */
void *bc_rt_xq_buffer(size_t bytes);

/* The calling thread's buffer for a prompt's expanded weights (bc_gemm's ws:
 * the integer GEMM's, one per thread that runs it), as bc_rt_xq_buffer's, at
 * most BC_RT_WX_MAX bytes (more: NULL, and the kernel decodes as it goes). */
#define BC_RT_WX_MAX ((size_t)8 << 20)
void *bc_rt_wx_buffer(size_t bytes);

/* Thread t's scratch (t < cx->threads). */
static inline float *bc_rt_slice(const bc_ctx *cx, int t)
{
    return cx->scratch + (size_t)t * cx->per_thread;
}

/* bytes of 64-byte aligned memory, or NULL; freed by bc_rt_free64 (NULL:
 * nothing). The kernels' scratch and the kept outputs (outbuf.c). */
void *bc_rt_alloc64(size_t bytes);
void bc_rt_free64(void *p);

/* One unit of a job: fn(arg, unit, thread), thread in [0, threads). */
typedef void (*bc_unit_fn)(const void *arg, size_t unit, int thread);

/* Run fn on every unit in [0, units) exactly once, on the calling thread (as
 * thread 0) and up to threads-1 pool helpers (pool.c), and return when all are
 * done. Units are claimed in increasing order by whichever thread is free, so
 * a unit's result must depend only on the unit, never on the thread. Called
 * while the pool is busy (from another thread, or from inside a unit), the
 * job runs on the calling thread alone. */
void bc_rt_run(int threads, size_t units, bc_unit_fn fn, const void *arg);

/* One row of a row-wise op: fn(arg, row). */
typedef void (*bc_row_fn)(const void *arg, size_t row);

/* fn on every row in [0, rows): in a plain loop when threads <= 1, else in
 * blocks of consecutive rows (about four per thread) spread over the threads
 * (bc_rt_run). A row's result must depend only on the row. */
void bc_rt_rows(int threads, size_t rows, bc_row_fn fn, const void *arg);

/* The threads a job asking for `want` would get now (helpers are started on
 * first use; 1 in a forked child or where helpers cannot be started). */
int bc_rt_pool_threads(int want);

/* Called in a forked child: the pool's helpers do not exist there. */
void bc_rt_pool_forked(void);

/* ---- instruction sets and variants (isa.c, tune.c) ---- */

/* The widest instruction set this CPU and build run (BC_ISA_*). */
int bc_rt_best_isa(void);

/* The instruction set forced now (BLOCKC_ISA, bc_set_isa), or -1 (auto). */
int bc_rt_forced_isa(void);

/* The kernels of one instruction set. */
const bc_kernel_table *bc_rt_table_of(int isa);

/* The table auto mode runs: each family's fields from its chosen variant's
 * table, measuring the families not chosen yet first (tune.c). Never NULL. */
const bc_kernel_table *bc_rt_auto_table(void);

/* Evict [p, p + bytes) from every cache level (x86's clflush; elsewhere
 * nothing), so that the next reads come from memory, as a model's weights
 * do (tune.c). */
void bc_rt_evict(const void *p, size_t bytes);

/* The calling thread's CPU time in seconds (else a monotonic clock): what a
 * probe takes, not what a neighbour on the core takes from it (tune.c). */
double bc_rt_cpu_seconds(void);

/* ---- integer decoding's software prefetch (prefetch.c) ---- */

/* The bc_gemm pf (BC_GEMM_PF_*) a decoding product of dtype's weights on kt's
 * kernels runs with now: the forced mode (bc_set_prefetch, BLOCKC_PREFETCH),
 * else its group's choice, timed first (once) if not chosen yet;
 * BC_GEMM_PF_DEFAULT for a format outside the groups. Call it before a
 * product's threads start (it may time a probe on the calling thread). */
int bc_rt_prefetch(const bc_kernel_table *kt, int dtype);

#endif

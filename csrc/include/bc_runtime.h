/* bc_runtime.h: how the fast kernels run (thread count, instruction set).
 *
 * Results never depend on the thread count: every output element is computed
 * by the same operations in the same order whichever thread computes it. They
 * may differ in the last bits between instruction sets (FMA vs separate
 * multiply and add), always within float32 tolerance of the oracle.
 */
#ifndef BC_RUNTIME_H
#define BC_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel instruction sets. BLOCKC_ISA=generic|avx2|avx512 in the environment
 * (read once, at the first kernel call) forces one for every kernel; unset (or
 * BLOCKC_ISA=auto) each kernel family below runs the variant that measured
 * fastest on this CPU (BC_ISA_AUTO). */
#define BC_ISA_GENERIC 0
#define BC_ISA_AVX2 1
#define BC_ISA_AVX512 2
#define BC_ISA_AUTO 3
#define BC_NISAS 3

/* Kernel families: the unit a variant is chosen for. The candidates are the
 * instruction sets with FMA this CPU runs (AVX2, AVX-512); on packed weights
 * they give the same bits, so choices can differ between families without
 * changing any result of a GPT (prompt, KV-cache step, any thread count).
 * Only DECODE_ROWS (dot products on a caller's row-major weights, at most 3
 * rows) differs in the last bits between its variants. */
#define BC_FAMILY_GEMM 0         /* prompts: the GEMM tile of every layout (rounded x's: its family below), the backward's products */
#define BC_FAMILY_DECODE_F32 1   /* up to 3 rows on float32 panels (decoding) */
#define BC_FAMILY_DECODE_BF16 2  /* ... on bfloat16 and float16 panels */
#define BC_FAMILY_DECODE_Q8_0 3  /* ... on q8_0 panels */
#define BC_FAMILY_DECODE_ROWS 4  /* ... on a caller's row-major float32 weights */
#define BC_FAMILY_ATTENTION 5    /* attention: prompts, decoding, backward */
#define BC_FAMILY_ELEMENTWISE 6  /* activations, SwiGLU, additions, their backward, cross-entropy, AdamW */
#define BC_FAMILY_DECODE_Q8_0I 7 /* up to 3 rows on q8_0i, q4_0i, q5_0i, q6_ki, q5_ki, iq4_nli, iq4_xsi, q2_ki, q3_ki (integer dot products), and the prompts of these and q4_ki */
#define BC_FAMILY_DECODE_BF16I 8 /* ... on bfloat16i (bfloat16 dot products), and its prompts */
#define BC_FAMILY_DECODE_Q4_KI 9 /* up to 3 rows on q4_ki (its prompts: DECODE_Q8_0I's) */
#define BC_NFAMILIES 10

/* Why a family runs the variant it runs (bc_kernel_choice). */
#define BC_CHOSEN_WIDEST 0  /* one candidate only (or timing impossible): the widest */
#define BC_CHOSEN_TIMED 1   /* the fastest when this process timed them */
#define BC_CHOSEN_GIVEN 2   /* installed by bc_set_kernel_choice (e.g. a cached timing) */
#define BC_CHOSEN_FORCED 3  /* an instruction set is forced (BLOCKC_ISA, bc_set_isa) */

/* Threads the kernels use from now on (n >= 1), or n == 0 to go back to the
 * default: BLOCKC_NUM_THREADS if set, else OMP_NUM_THREADS, else the processors
 * (never more than the processors). BC_ESIZE if n < 0
 * or n > 4096. */
int bc_set_num_threads(int n);

/* *n = the number of threads the next kernel call may use (1 in a build without
 * threads). */
int bc_get_num_threads(int *n);

/* Force an instruction set (BC_ISA_GENERIC..BC_ISA_AVX512) on every kernel, or
 * BC_ISA_AUTO: each family its measured variant; BC_EOPTION if unknown or not
 * supported by this CPU and build. */
int bc_set_isa(int isa);

/* *isa = the instruction set forced now (BC_ISA_*), or BC_ISA_AUTO. */
int bc_get_isa(int *isa);

/* *isa = the best instruction set this CPU and build support (BC_ISA_*). */
int bc_best_isa(int *isa);

/* The variant kernel family `family` (BC_FAMILY_*) runs now: *isa (BC_ISA_*),
 * *how (BC_CHOSEN_*), and seconds[i] (n_seconds >= BC_NISAS; or seconds NULL)
 * the time one probe of instruction set i took when last measured (0: not
 * measured). Asking measures the families not chosen yet (a few tens of
 * milliseconds in all, once per process) unless an instruction set is forced.
 * BC_ENULL, BC_EOPTION (family), BC_ESIZE (n_seconds). */
int bc_kernel_choice(int *isa, int *how, double *seconds, int family, size_t n_seconds);

/* Run `isa`'s variant for `family` from now on when not forced (how:
 * BC_CHOSEN_GIVEN): a choice measured before, e.g. read from a cache.
 * BC_EOPTION unless isa is one of the family's candidates on this CPU. */
int bc_set_kernel_choice(int family, int isa);

/* Measure every family's candidates again now and run the fastest (how:
 * BC_CHOSEN_TIMED). BC_ENOMEM when the probes' memory cannot be had (the
 * choices are then unchanged). */
int bc_tune_kernels(void);

/* A test's handle on the choice: from now on the probe of `isa`'s variant of
 * `family` takes `seconds` longer (spinning; 0 removes it). BC_EOPTION
 * (family, isa; seconds < 0, > 1 or NaN). */
int bc_tune_handicap(int family, int isa, double seconds);

/* Software prefetch in integer decoding (up to 3 rows of x on the integer
 * formats). Prefetching a block's bytes 8 KiB ahead (prefetchnta) speeds
 * some formats up on some CPUs and slows others down (AMD Zen 4, one thread
 * from memory: q4_ki 1.55x faster without; AMD Zen 5: 1.6x faster with), and
 * changes no bit of any result. The formats are in two groups, each with the
 * mode compiled as its default:
 *   BC_PF_GROUP_FORWARD  q4_ki, q5_ki, q6_ki, iq4_xsi (super-blocks read
 *                        forward): no prefetch by default;
 *   BC_PF_GROUP_BLOCKS   q8_0i, q4_0i, q5_0i, iq4_nli, q4_1i, q5_1i, q2_ki,
 *                        q3_ki: prefetch by default.
 * BC_PREFETCH_AUTO (the default) runs each group's measured mode: at the
 * first integer decoding (or bc_prefetch_choice) a group not chosen yet is
 * timed once, a decoding product from memory with prefetch on and off in
 * alternating rounds, and keeps its default unless the other mode is at
 * least 5% faster. BLOCKC_PREFETCH=auto|default|on|off in the environment
 * (read once, at the first use) or bc_set_prefetch forces a mode on every
 * group: default (the compiled split, never timed), on, off. */
#define BC_PREFETCH_AUTO 0
#define BC_PREFETCH_DEFAULT 1
#define BC_PREFETCH_ON 2
#define BC_PREFETCH_OFF 3
#define BC_PF_GROUP_FORWARD 0
#define BC_PF_GROUP_BLOCKS 1
#define BC_NPF_GROUPS 2

/* Force a prefetch mode (BC_PREFETCH_*) on integer decoding from now on, or
 * BC_PREFETCH_AUTO: each group its measured mode. BC_EOPTION if unknown. */
int bc_set_prefetch(int mode);

/* *mode = the prefetch mode forced now (BC_PREFETCH_*), or BC_PREFETCH_AUTO. */
int bc_get_prefetch(int *mode);

/* Whether group `group` (BC_PF_GROUP_*) prefetches now: *on (1 or 0), *how
 * (BC_CHOSEN_*: TIMED, GIVEN, FORCED, or WIDEST: the default kept, nothing to
 * time on this CPU and build), and seconds[0], seconds[1] (n_seconds >= 2; or
 * seconds NULL) the time its probe took without and with prefetch when last
 * measured (0: not measured). Asking measures the group when it is not
 * chosen yet and no mode is forced (tens of milliseconds, once per process).
 * BC_ENULL, BC_EOPTION (group), BC_ESIZE (n_seconds). */
int bc_prefetch_choice(int *on, int *how, double *seconds, int group, size_t n_seconds);

/* Run group `group` with prefetch on (1) or off (0) from now on when no mode
 * is forced (how: BC_CHOSEN_GIVEN): a choice measured before, e.g. cached.
 * BC_EOPTION (group, on). */
int bc_set_prefetch_choice(int group, int on);

/* Measure every group again now and keep the faster mode (how:
 * BC_CHOSEN_TIMED). BC_ENOMEM when the probe's memory cannot be had (the
 * choices are then unchanged). */
int bc_tune_prefetch(void);

/* A test's handle on the prefetch choice: from now on the probe of group
 * `group` with prefetch `on` (1 or 0) takes `seconds` longer (spinning; 0
 * removes it). BC_EOPTION (group, on; seconds < 0, > 1 or NaN). */
int bc_prefetch_handicap(int group, int on, double seconds);

/* Advise the system that the whole pages inside [p, p + bytes) (memory a
 * caller has allocated and not written yet: an output about to be written
 * once) be backed by small pages rather than transparent huge pages. Linux:
 * madvise(MADV_NOHUGEPAGE); elsewhere nothing. The contents and the memory's
 * ownership do not change. Why: NumPy asks for huge pages on every array of
 * 4 MiB or more, and under a hypervisor the first write to each fresh 2 MiB
 * page can cost far more than the 512 small pages it replaces (measured by
 * benches/bench_pages.py). Advice only: a system that refuses it (no huge
 * pages, an unmapped range) is not an error. BC_ENULL when p is NULL and
 * bytes > 0. */
int bc_advise_small_pages(void *p, size_t bytes);

/* Large outputs' memory, kept between outputs. A fresh output of many
 * megabytes is all first writes, each page a fault (a 1024-token prompt's
 * 201 MB of logits: ~70 ms on one thread of an AMD Zen 5); a block handed back
 * is kept mapped for the next output it fits: at most BC_OUT_KEEP blocks and
 * BC_OUT_KEEP_BYTES in all, the oldest freed first. BLOCKC_OUTPUT_POOL=0 (read
 * once) keeps none. Thread-safe. */
#define BC_OUT_KEEP 4
#define BC_OUT_KEEP_BYTES 536870912

/* *p = bytes (> 0) of 64-byte aligned memory, contents unspecified: a kept
 * block that holds them and is less than twice their size, else a fresh one
 * advised onto small pages (bc_advise_small_pages). Hand it back with
 * bc_out_give. BC_ENULL, BC_ESIZE (bytes 0 or past the address space),
 * BC_ENOMEM (*p NULL then). */
int bc_out_take(void **p, size_t bytes);

/* Hand back p (from bc_out_take; NULL: nothing): kept, or freed. The caller
 * must not touch it after. */
int bc_out_give(void *p);

/* *blocks, *bytes (capacities) kept now. BC_ENULL. */
int bc_out_kept(size_t *blocks, size_t *bytes);

/* Free every kept block (memory back to the system now). */
int bc_out_release(void);

#ifdef __cplusplus
}
#endif

#endif

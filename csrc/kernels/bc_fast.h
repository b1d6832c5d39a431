/* bc_fast.h: the per-instruction-set kernel parts (internal).
 *
 * fast_tmpl.h is compiled three times (fast_generic.c, fast_avx2.c,
 * fast_avx512.c); linear.c, attention.c and elementwise.c pick one at run
 * time and spread the work over threads. */
#ifndef BC_FAST_H
#define BC_FAST_H

#include <stddef.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BC_HAVE_X86_KERNELS 1
#endif

/* GEMM blocking, shared by every instruction set so that the order of the
 * sums (the K blocks) is a property of the problem, not of the machine. */
#define BC_KC 256
#define BC_NC 512

/* y (N,OC) = act(r + x (N,C) @ w (OC,C)^T + b) */
typedef struct {
    float *y;
    const float *x, *w, *b, *r;  /* b (OC), r (N,OC): NULL when absent; r may be y */
    size_t n, c, oc;
    int act;                     /* BC_ACT_* or BC_ACT_NONE */
} bc_gemm;

/* Scratch floats one thread needs for gemm_part. */
#define BC_GEMM_SCRATCH (BC_KC * BC_NC + 16 * BC_KC + 64)

typedef struct {
    float *out;
    const float *q, *k, *v;
    size_t ldo, ldq, ldk, ldv;
    size_t tq, tk, n_heads, d_head, q_pos0;
    int causal;
} bc_attn;

#define BC_ATT_BK 64   /* keys per tile */

#define BC_DECLARE_FAST(SUF)                                                              \
    size_t bc_gemm_mr_##SUF(void);                                                        \
    size_t bc_gemm_nr_##SUF(void);                                                        \
    void bc_gemm_part_##SUF(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1, \
                            float *scratch);                                              \
    size_t bc_attn_bq_##SUF(void);                                                        \
    size_t bc_attn_scratch_##SUF(size_t d_head);                                          \
    void bc_attn_unit_##SUF(const bc_attn *a, size_t h, size_t i0, float *scratch);       \
    void bc_act_##SUF(float *y, const float *x, size_t n, int kind);                      \
    void bc_swiglu_##SUF(float *y, const float *gate, const float *up, size_t n);         \
    void bc_add_##SUF(float *y, const float *a, const float *b, size_t n);

BC_DECLARE_FAST(generic)
#ifdef BC_HAVE_X86_KERNELS
BC_DECLARE_FAST(avx2)
BC_DECLARE_FAST(avx512)
#endif

#endif

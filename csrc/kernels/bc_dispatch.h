/* bc_dispatch.h: the kernel table, the one seam between the instruction sets
 * and everything else (internal).
 *
 * fast_tmpl.h is compiled once per instruction set (fast_generic.c,
 * fast_avx2.c, fast_avx512.c); each copy exports exactly one symbol, its
 * const table of kernels (bc_kernels_generic, bc_kernels_avx2,
 * bc_kernels_avx512). The runtime picks one table per entry-point call
 * (bc_rt_ctx); linear.c, attention.c and elementwise.c split the work over
 * threads and call the table's parts. A kernel added later (another weight
 * type, a backward pass) is one more field here and one more function in the
 * template.
 */
#ifndef BC_DISPATCH_H
#define BC_DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include "bc_engine.h"  /* BC_DTYPE_* */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BC_HAVE_X86_KERNELS 1
#endif

/* Weight layouts a linear reads (bc_gemm.wf): a caller's row-major float32
 * matrix, or a packed matrix (bc_pack, bc_engine.h) of each BC_DTYPE_*. */
#define BC_WF_ROWS 0
#define BC_WF_PANEL_F32 1    /* BC_WF_PANEL_F32 + BC_DTYPE_* is that dtype's packing */
#define BC_WF_PANEL_BF16 2
#define BC_WF_PANEL_Q8 3
#define BC_NWF 4

/* Outputs per panel of a packed matrix (bc_engine.h), on every instruction set. */
#define BC_PANEL 16

/* One block of a q8_0 packed matrix (bc_engine.h): a panel's 16 rows, 32 columns. */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    int8_t q[32][BC_PANEL];     /* q[k][row] */
} bc_q8_block;

/* GEMM blocking, shared by every instruction set so that the order of the
 * sums (the K blocks) is a property of the problem, not of the machine. */
#define BC_KC 256
#define BC_NC 256

/* Rows up to which a linear streams its weights once (rows_part) instead of
 * running the GEMM (gemm_part): decoding. On packed weights both give the
 * same bits; on a caller's rows rows_part runs dot products (other bits). */
#define BC_ROWS_MAX 3

/* y (N,OC) = act(r + x (N,C) @ w (OC,C)^T + b) */
typedef struct {
    float *y;
    const float *x;              /* rows of C floats, contiguous */
    const void *w;               /* in layout wf */
    const float *b, *r;          /* b (OC), r (N,OC): NULL when absent; r may be y */
    size_t n, c, oc;
    int wf;                      /* BC_WF_* */
    int act;                     /* BC_ACT_* or BC_ACT_NONE */
} bc_gemm;

/* Scratch floats one thread needs for gemm_part. */
#define BC_GEMM_SCRATCH (BC_KC * BC_NC + 16 * BC_KC + 64)

/* One multi-head attention call (see bc_k_attention). */
typedef struct {
    float *out;
    const float *q;
    size_t ldo, ldq;
    const float *k, *v;            /* laid out as bc_kv (kernels.h) says */
    size_t ldk, ldv, khs, vhs;
    int k_tiled;
    size_t tq, tk, n_heads, d_head, q_pos0;
    size_t kv_group;   /* query heads per K/V head: head h reads K/V head h / kv_group */
    int causal;
} bc_attn;

#define BC_ATT_BK 64   /* keys per tile */

/* The kernels of one instruction set. */
typedef struct {
    const char *name;
    /* GEMM: the rows [n0,n1) x columns [o0,o1) of g->y, o0 and o1 - o0 (unless
     * o1 == oc) multiples of gemm_nr and BC_PANEL; one function per layout
     * (index BC_WF_*); scratch: BC_GEMM_SCRATCH floats */
    size_t gemm_mr, gemm_nr;
    void (*gemm_part[BC_NWF])(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1,
                              float *scratch);
    /* g->n <= BC_ROWS_MAX rows, columns [o0,o1) (o0 a multiple of BC_PANEL),
     * streaming w once; no scratch */
    void (*rows_part[BC_NWF])(const bc_gemm *g, size_t o0, size_t o1);
    /* attention: head h, queries [i0, i0 + attn_bq) (fewer at the end);
     * scratch: attn_scratch(d_head) floats */
    size_t attn_bq;
    size_t (*attn_scratch)(size_t d_head);
    void (*attn_unit)(const bc_attn *a, size_t h, size_t i0, float *scratch);
    /* decoding: query row i of heads h0..h0+nh-1 (nh <= attn_bq, one K/V head),
     * the same bits as attn_unit; scratch: attn_scratch(d_head) floats */
    void (*attn_decode)(const bc_attn *a, size_t i, size_t h0, size_t nh, float *scratch);
    /* elementwise, y (n) */
    void (*act)(float *y, const float *x, size_t n, int kind);
    void (*swiglu)(float *y, const float *gate, const float *up, size_t n);
    void (*add)(float *y, const float *a, const float *b, size_t n);
} bc_kernel_table;

extern const bc_kernel_table bc_kernels_generic;
#ifdef BC_HAVE_X86_KERNELS
extern const bc_kernel_table bc_kernels_avx2;
extern const bc_kernel_table bc_kernels_avx512;
#endif

#endif

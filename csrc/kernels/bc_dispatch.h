/* bc_dispatch.h: the kernel table, the one seam between the instruction sets
 * and everything else (internal).
 *
 * fast_tmpl.h is compiled once per instruction set (fast_generic.c,
 * fast_avx2.c, fast_avx512.c); each copy exports exactly one symbol, its
 * const table of kernels (bc_kernels_generic, bc_kernels_avx2,
 * bc_kernels_avx512). The runtime (the layer above) picks one table per
 * entry-point call (bc_rt_ctx); parallel/'s linear.c, attention.c,
 * elementwise.c and grad.c split the work over threads and call the table's
 * parts. Nothing here calls up into them: scratch comes in as an argument.
 * A kernel added later (a backward pass, a variant) is one more field here
 * and one more function in the op file that owns it (fast_linear.h,
 * fast_decode.h, fast_attention.h, fast_elementwise.h, fast_loss.h); a weight
 * format's kernels are one more entry of wf (fast_formats.h).
 */
#ifndef BC_DISPATCH_H
#define BC_DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include "bc_engine.h"  /* BC_DTYPE_* */
#include "bc_format.h"  /* BC_PANEL */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BC_HAVE_X86_KERNELS 1
#endif

/* Weight layouts a linear reads (bc_gemm.wf): a caller's row-major float32
 * matrix, or a packed matrix (bc_pack, bc_engine.h) of a BC_DTYPE_*, whose
 * panels its row of the formats' table (bc_format.h) describes. */
#define BC_WF_ROWS 0
#define BC_WF_PANEL(dtype) (1 + (dtype))
#define BC_WF_DTYPE(wf) ((wf) - 1)   /* of a BC_WF_PANEL */
#define BC_NWF (1 + BC_NDTYPE)

/* GEMM blocking, shared by every instruction set so that the order of the
 * sums (the K blocks) is a property of the problem, not of the machine. */
#define BC_KC 256
#define BC_NC 256

/* Rows up to which a linear streams its weights once (rows_part) instead of
 * running the GEMM (gemm_part): decoding. On packed weights both give the
 * same bits; on a caller's rows rows_part runs dot products (other bits). */
#define BC_ROWS_MAX 3

/* The identity activation (for the fused linear epilogue). */
#define BC_ACT_NONE (-1)

/* y (N,OC) = act(r + x (N,C) @ w (OC,C)^T + b) */
typedef struct {
    float *y;
    const float *x;              /* rows of C floats, contiguous */
    const void *w;               /* in layout wf */
    const float *b, *r;          /* b (OC), r (N,OC): NULL when absent; r may be y */
    size_t n, c, oc;
    int wf;                      /* BC_WF_* */
    int act;                     /* BC_ACT_* or BC_ACT_NONE */
    int pf;                      /* integer decoding's software prefetch: BC_GEMM_PF_* */
    /* the calling thread's buffer of at least bytes (64-byte aligned; NULL when
     * it cannot be had): where a prompt's product expands its weights once
     * (the integer K-quants); NULL: none, the kernels decode as they go */
    void *(*ws)(size_t bytes);
} bc_gemm;

/* bc_gemm's pf: what the integer formats' decoding (up to BC_ROWS_MAX rows:
 * xq_part) does about software prefetch (bc_runtime.h's BC_PREFETCH_*; the
 * same bits either way). Prompts (more rows) and other layouts ignore it. */
#define BC_GEMM_PF_DEFAULT 0     /* the format's compiled default (fast_intdot.h's fk_prefetches) */
#define BC_GEMM_PF_ON 1
#define BC_GEMM_PF_OFF 2

/* Rows of A the backward's product packs at once when A's rows are columns of
 * a (dw = dy^T x): a multiple of MR is used, at least MR on every ISA. */
#define BC_MM_MC 112

/* Scratch floats one thread needs for gemm_part and mm_part: a B block and
 * rows of A (MR of them for gemm_part, BC_MM_MC for mm_part). */
#define BC_GEMM_SCRATCH (BC_KC * BC_NC + BC_MM_MC * BC_KC + 64)

/* The backward's products (bc_k_mm): C (M,N) = [C +] A (M,K) B (K,N).
 *   A(i,k) = a[i*a_rs + k*a_cs]: rows (a_cs == 1) or columns (a_rs == 1) of a
 *            row-major matrix;
 *   B(k,j) = b[k*ldb + j] (BC_MM_B_ROWS: a row-major (K,N) matrix), or the
 *            element (k, j) of a float32 panel matrix of K rows and ldb = N
 *            columns (BC_MM_B_PANELS: b[(k/PW)*ldb*PW + j*PW + k%PW], bc_pack's
 *            layout read as its own rows);
 *   C(i,j) = c[i*ldc + j], or with c_panels the element (j, i) of a float32
 *            panel matrix of N rows and M columns: c[(j/PW)*M*PW + i*PW + j%PW]
 *            (a packed weight's gradient, in the weight's own layout). */
#define BC_MM_B_ROWS 0
#define BC_MM_B_PANELS 1
typedef struct {
    float *c;
    size_t ldc;
    int c_panels;
    const float *a;
    size_t a_rs, a_cs;
    const float *b;
    size_t ldb;
    int b_kind;
    size_t m, n, k;
    int accumulate;    /* C += A B; else C = A B */
} bc_mm;

/* Where attention's keys and values lie, for K/V head g, key j, dimension d:
 *   rows   k[g * khs + j * ldk + d]: a q/k/v buffer (khs = Dh, ldk its row
 *          width) or a head-major cache (khs = capacity Dh, ldk = Dh);
 *   tiled  (k_tiled) k[g * khs + (j / BK) * Dh * BK + d * BK + j % BK]: a cache's
 *          keys transposed in tiles of BK = BC_ATT_BK, written once, which the
 *          decoding kernel streams as they lie;
 *   values v[g * vhs + j * ldv + d].
 * A half cache (k16, v16 not NULL; k and v NULL; k_tiled): the same places in
 * IEEE halves, which the kernels widen a tile at a time: the bits of a float
 * cache holding the halves' values. */
typedef struct {
    const float *k, *v;
    size_t ldk, ldv, khs, vhs;
    int k_tiled;
    const uint16_t *k16, *v16;
    /* sliding windows and rings: key j sits at row j mod ring of the layout above
     * (ring 0: row j; a ring is a multiple of BC_ATT_BK, so a tile never wraps);
     * window W (0: none): query position p sees keys p-W+1..p only */
    size_t ring, window;
    /* a quantised cache (kq, vq not NULL; k, v, k16, v16 NULL; kq_dtype
     * BC_DTYPE_Q8_0 or BC_DTYPE_Q4_0): keys and values both as rows, key j's
     * row (khs, ldk, vhs, ldv in elements, Dh a multiple of 32) at
     * bc_kvq_bytes(kq_dtype, g * khs + j * ldk) in bc_format.h's blocks, which
     * the kernels read back a tile at a time: the bits of a float cache holding
     * the blocks' values */
    const unsigned char *kq, *vq;
    int kq_dtype;
    /* soft-capping (Gemma 2): 0, none; else each scaled score s becomes
     * softcap * tanh(s / softcap) before the mask and the softmax */
    float softcap;
} bc_kv;

/* One multi-head attention call (see bc_k_attention). */
typedef struct {
    float *out;
    const float *q;
    size_t ldo, ldq;
    const float *k, *v;            /* laid out as bc_kv says */
    size_t ldk, ldv, khs, vhs;
    int k_tiled;
    const uint16_t *k16, *v16;     /* a half cache's, in place of k and v (bc_kv) */
    size_t tq, tk, n_heads, d_head, q_pos0;
    size_t kv_group;   /* query heads per K/V head: head h reads K/V head h / kv_group */
    int causal;
    float *lse;        /* NULL, or (H, Tq): each query's log-sum-exp of its scaled scores */
    size_t ring, window;  /* as bc_kv's */
    const unsigned char *kq, *vq;  /* a quantised cache's, in place of k and v (bc_kv) */
    int kq_dtype;
    float softcap;        /* as bc_kv's */
} bc_attn;

/* One attention backward call (see bc_k_attention_backward): the forward's
 * q, k, v (rows of a q/k/v buffer, ldq), output o and do (ldo), its lse and the
 * rows' D = sum(do * o) (H, T); dq, dk, dv rows (ldd) of a gradient buffer
 * laid out as q/k/v. */
typedef struct {
    float *dq, *dk, *dv;
    size_t ldd;
    const float *q, *k, *v, *o, *dout, *lse, *dsum;
    size_t ldq, ldo;
    size_t t, n_heads, d_head, kv_group;
    int causal;
} bc_attn_bwd;

#define BC_ATT_BK 64   /* keys per tile */

/* One AdamW update (torch.optim.AdamW's single-tensor step, its float32
 * operations in its order, each rounded once: the same bits on every
 * instruction set): g' = g * gscale (gscale != 1 only), p' = p * decay,
 * m' = m + omb1 (g' - m), v' = v b2 + (omb2 g') g',
 * p'' = p' + step (m' / (sqrt(v') / bc2s + eps)). */
typedef struct {
    float decay, b2, omb1, omb2, step, bc2s, eps, gscale;
} bc_adamw_args;

/* Rows of x rounded once per product for the formats that multiply them so
 * (bc_wf_kernels.xq_part), each row of c columns padded to 64 bytes:
 *   q8_0i, q4_0i, q5_0i, q4_ki, q6_ki, q5_ki (bc_engine.h says how): nb = ceil(c / 32) blocks:
 *     q (nb * 32 int8, zero past c), then d (nb floats: the blocks' scales), then s
 *     (nb int32: -128 * the block's sum of q, the correction of the weights' +128
 *     bytes); q6_ki then s16 (2 nb int32: -32 times the sums of q of each block's
 *     halves, the correction of its weights' + 32); q2_ki and q3_ki then s16 (2 nb
 *     int32: the sums of q of each block's halves themselves); q4_ki and q5_ki then m
 *     (nb floats: d * the block's sum of q, rounded once: their minimums' factor);
 *   bfloat16i: ceil(c / 2) pairs, uint16 [2j + t] the bfloat16 of x[2j + t]
 *     (zero past c). */
static inline size_t bc_xq_row_bytes(int dtype, size_t c)
{
    if (dtype == BC_DTYPE_BF16I)
        return ((c + 1) / 2 * 4 + 63) / 64 * 64;
    const size_t nb = (c + 31) / 32;
    if (dtype == BC_DTYPE_Q6_KI || dtype == BC_DTYPE_Q2_KI || dtype == BC_DTYPE_Q3_KI)  /* and s16 */
        return (nb * 48 + 63) / 64 * 64;
    if (dtype == BC_DTYPE_Q4_KI || dtype == BC_DTYPE_Q5_KI)  /* and m */
        return (nb * 44 + 63) / 64 * 64;
    return (nb * 40 + 63) / 64 * 64;
}

/* One weight layout's kernels on one instruction set (bc_kernel_table.wf). */
typedef struct {
    /* decoding: g->n <= BC_ROWS_MAX rows, columns [o0,o1) (o0 a multiple of
     * BC_PANEL), streaming w once; no scratch */
    void (*rows_part)(const bc_gemm *g, size_t o0, size_t o1);
    /* the GEMM's copy of a block of w: bp (nc columns of kc rows as float32
     * panels, zero past nc) <- columns o0.. (a multiple of BC_PANEL), rows
     * p0..p0+kc (p0 a multiple of BC_KC) of g->w (oc, c); NULL: w is float32
     * panels, read where they lie */
    void (*panels)(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc);
    /* a format that multiplies rows of x rounded once per product (q8_0i,
     * bfloat16i; NULL: none): rows [n0,n1) of g->y (row i's rounded x at xq +
     * (i - n0) * bc_xq_row_bytes(dtype, c)), columns [o0,o1) (o0 a multiple of
     * BC_PANEL); any number of rows, one chain per output; no scratch.
     * rows_part and panels are unused then. */
    void (*xq_part)(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1, size_t o0,
                    size_t o1);
    /* its rounding: xq (n rows, bc_xq_row_bytes(dtype, c) each) <- x (n, c), the
     * same bytes on every instruction set */
    void (*xq_rows)(unsigned char *xq, const float *x, size_t n, size_t c);
    /* xq_part again, called for more than BC_ROWS_MAX rows (prompts): a field of
     * its own so that its family's probe times a prompt's product beside the
     * decoding (tune.c's probe_prompt: on a Zen 4, AVX2's bfloat16i decoded as
     * fast as AVX-512's from memory and ran prompts at a third of its speed; the
     * float32 GEMM's probe, which chose for prompts before, timed AVX2 and
     * AVX-512 within 2% where AVX2's q4_ki prompts ran at 0.43 times the speed) */
    void (*xq_gemm)(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1, size_t o0,
                    size_t o1);
} bc_wf_kernels;

/* The kernels of one instruction set. */
typedef struct {
    const char *name;
    /* GEMM: the rows [n0,n1) x columns [o0,o1) of g->y, o0 and o1 - o0 (unless
     * o1 == oc) multiples of gemm_nr and BC_PANEL, any layout (its blocks
     * copied by wf[g->wf].panels); scratch: BC_GEMM_SCRATCH floats */
    size_t gemm_mr, gemm_nr;
    void (*gemm_part)(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1,
                      float *scratch);
    /* the layouts' kernels, by BC_WF_* */
    bc_wf_kernels wf[BC_NWF];
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
    /* ---- the backward ---- */
    /* products: rows [i0,i1) x columns [j0,j1) of m->c, i0 a multiple of
     * gemm_mr, j0 and j1 - j0 (unless j1 == n) multiples of BC_MM_NB;
     * scratch: BC_GEMM_SCRATCH floats */
    void (*mm_part)(const bc_mm *m, size_t i0, size_t i1, size_t j0, size_t j1, float *scratch);
    /* attention: dk, dv of K/V head g's keys [j0, j0 + BC_ATT_BK), from every query
     * of its query heads; dq of query head h's queries [i0, i0 + BC_ATT_BK);
     * scratch: attn_bwd_scratch(d_head) floats */
    size_t (*attn_bwd_scratch)(size_t d_head);
    void (*attn_bwd_kv)(const bc_attn_bwd *a, size_t g, size_t j0, float *scratch);
    void (*attn_bwd_q)(const bc_attn_bwd *a, size_t h, size_t i0, float *scratch);
    /* dx (n) = dy * act'(x) (dx may be dy); dgate, dup (n) from dy and the
     * forward's gate, up (silu(gate) * up); outputs may alias dy */
    void (*act_bwd)(float *dx, const float *dy, const float *x, size_t n, int kind);
    void (*swiglu_bwd)(float *dgate, float *dup, const float *dy, const float *gate,
                       const float *up, size_t n);
    /* a bias's gradient: db[o] += dy[i][o] for rows i in order, o in [o0,o1) */
    void (*colsum)(float *db, const float *dy, size_t n, size_t oc, size_t o0, size_t o1);
    /* one row of the cross-entropy: *loss = logsumexp(z) - z[target], and (dz
     * not NULL; it may be z) dz = scale * (softmax(z) - onehot(target)) */
    void (*xent_row)(float *dz, float *loss, const float *z, size_t v, size_t target,
                     float scale);
    /* AdamW on p, m, v (n) in place from the gradient g (n): bc_adamw_args */
    void (*adamw)(float *p, float *m, float *v, const float *g, size_t n,
                  const bc_adamw_args *a);
    /* ---- load and save time ---- */
    /* y (2 n bytes, little-endian) = x (n) rounded to nearest even as IEEE halves
     * (to_type BC_GGML_F16: bc_f32_to_half_numpy, NumPy's bits) or bfloat16s
     * (BC_GGML_BF16: bc_f32_to_bf16); the same bits on every instruction set
     * (fast_convert.h) */
    void (*round16)(unsigned char *y, const float *x, size_t n, int to_type);
} bc_kernel_table;

/* Column blocks of the backward's products: a multiple of every NR and of BC_PANEL. */
#define BC_MM_NB 32

extern const bc_kernel_table bc_kernels_generic;
#ifdef BC_HAVE_X86_KERNELS
extern const bc_kernel_table bc_kernels_avx2;
extern const bc_kernel_table bc_kernels_avx512;
#endif

#endif

/* bc_parallel.h: the internal kernels shared by the dynamic engine and the GPT,
 * each op's work split over threads (linear.c, attention.c, elementwise.c,
 * grad.c): the layer between the runtime (the threads, the per-call context)
 * and the compute kernels (kernels/: the table of each instruction set).
 *
 * Not part of the public API (no validation here: public entry points validate
 * sizes and pointers before calling in). Row-major float32 throughout. Every
 * kernel runs on the context of its entry-point call (bc_rt.h: the kernel
 * table, the thread cap, the scratch), takes it last, allocates nothing and
 * cannot fail. These are the seams the fast path optimises: signatures stay,
 * implementations change.
 */
#ifndef BC_PARALLEL_H
#define BC_PARALLEL_H

#include <stddef.h>
#include <stdint.h>
#include "bc_engine.h"    /* BC_ACT_* */
#include "bc_dispatch.h"  /* BC_ACT_NONE, bc_kv, bc_mm, bc_attn_bwd */
#include "bc_rt.h"        /* bc_ctx */

/* y (N,OC) = act(r (N,OC) + x (N,C) @ w (OC,C)^T + b (OC)), w in layout wf
 * (BC_WF_ROWS: a row-major float32 matrix; BC_WF_PANEL(dtype): packed, bc_engine.h).
 * r may be NULL, or exactly y (an in-place residual); b may be NULL; act is
 * BC_ACT_GELU_TANH, BC_ACT_GELU, BC_ACT_RELU, BC_ACT_SILU or BC_ACT_NONE. y
 * must not alias x or w. Every row of y gets the same bits whatever the other
 * rows: on packed weights up to BC_ROWS_MAX rows (decoding) stream the panels
 * once and more rows run the GEMM, in the same order of sums; a caller's rows
 * always run the GEMM. */
void bc_k_linear(float *y, const float *x, const void *w, int wf, const float *b,
                 const float *r, size_t n, size_t c, size_t oc, int act, const bc_ctx *cx);

/* y (N,OC) = x (N,C) @ w (OC,C)^T + b for a caller's row-major w: as bc_k_linear,
 * except that up to BC_ROWS_MAX rows are dot products streaming each row of w
 * once (a GEMV at the memory's speed, its sums in another order than the
 * GEMM's: a row's bits then depend on whether it came alone). */
void bc_k_linear_few(float *y, const float *x, const float *w, const float *b, size_t n,
                     size_t c, size_t oc, const bc_ctx *cx);

/* Multi-head scaled dot-product attention for one sequence.
 * out (Tq, H*Dh), row stride ldo; q (Tq, .) row stride ldq, head h at column h*Dh;
 * keys and values (Tk of them) as kv describes, with kv_heads heads (kv_heads
 * divides H: grouped-query attention, query head h reading K/V head
 * h / (H / kv_heads); kv_heads == H is plain multi-head attention).
 * Query i sits at position q_pos0 + i and key j at position j; with causal != 0,
 * keys at positions after the query's are masked. Scores are q.k / sqrt(Dh).
 * cx must have scratch for heads of Dh (bc_rt_ctx(cx, d_head)).
 * Never holds more than a tile of scores: no (Tq, Tk) matrix, for any head. */
void bc_k_attention(float *out, size_t ldo, const float *q, size_t ldq, const bc_kv *kv,
                    size_t tq, size_t tk, size_t n_heads, size_t kv_heads, size_t d_head,
                    size_t q_pos0, int causal, const bc_ctx *cx);

/* bc_k_attention, also writing lse (H, Tq): each query's log-sum-exp of its
 * scaled scores (for the backward; NULL: as bc_k_attention). */
void bc_k_attention_lse(float *out, size_t ldo, float *lse, const float *q, size_t ldq,
                        const bc_kv *kv, size_t tq, size_t tk, size_t n_heads, size_t kv_heads,
                        size_t d_head, size_t q_pos0, int causal, const bc_ctx *cx);

/* Rotary position embeddings, rotate-half layout (Hugging Face's Llama):
 * cs (T, R/2, 2) = cos and sin of (pos0 + t) * f_i for t < T, i < R/2 (R = d_rot),
 * each multiplied by attn when it is not 1; f_i = inv_freq[i] (R/2), or NULL:
 * theta^(-2i/R), the frequency and the angle's product taken in float32 as
 * transformers takes them, cos and sin in double then rounded. */
void bc_k_rope_table(float *cs, size_t pos0, size_t t, size_t d_rot, float theta,
                     const float *inv_freq, float attn);

/* x (T, .) row stride ldx: heads 0..n_heads-1 at columns h*Dh, each rotated in
 * place by its row's angles in cs (T, Dh/2, 2): for i < Dh/2,
 * (a, b) = (x[i], x[i + Dh/2]) -> (a cos - b sin, b cos + a sin). */
void bc_k_rope(float *x, size_t ldx, size_t t, size_t n_heads, size_t d_head, const float *cs,
               const bc_ctx *cx);

/* bc_k_rope on each head's first d_rot dimensions (cs (T, d_rot/2, 2), pairs
 * (i, i + d_rot/2)); the rest of the head unchanged. */
void bc_k_rope_part(float *x, size_t ldx, size_t t, size_t n_heads, size_t d_head, size_t d_rot,
                    const float *cs, const bc_ctx *cx);

/* Row norms over the last axis. x, y (N,C); gain g (C) and shift b (C) may be NULL.
 * rms:   y = x / sqrt(mean(x^2) + eps) * g   (every finite row, however large)
 * layer: y = (x - mean) / sqrt(var + eps) * g + b, var over C (not C-1). */
void bc_k_rmsnorm(float *y, const float *x, const float *g, size_t n, size_t c, float eps,
                  const bc_ctx *cx);
void bc_k_layernorm(float *y, const float *x, const float *g, const float *b,
                    size_t n, size_t c, float eps, const bc_ctx *cx);

/* Elementwise activations, y (n) = act(x (n)); y may alias x. */
void bc_k_act(float *y, const float *x, size_t n, int kind, const bc_ctx *cx);

/* y (n) = silu(gate (n)) * up (n); y may alias either. */
void bc_k_swiglu(float *y, const float *gate, const float *up, size_t n, const bc_ctx *cx);

/* y (n) = a (n) + b (n); y may alias a or b. */
void bc_k_add(float *y, const float *a, const float *b, size_t n, const bc_ctx *cx);

/* y (n) = a (n) * b (n); y may alias a or b. */
void bc_k_mul(float *y, const float *a, const float *b, size_t n, const bc_ctx *cx);

/* y (n) = a (n) + float(s * b (n)) (a NULL: s * b); y may alias a or b. */
void bc_k_add_scaled(float *y, const float *a, const float *b, float s, size_t n,
                     const bc_ctx *cx);

/* y (n) = x (n) * s; y may alias x. */
void bc_k_scale(float *y, const float *x, float s, size_t n, const bc_ctx *cx);

/* ---- the backward (grad.c): gradients of the kernels above ---------------
 * Every output element is computed by one thread in one fixed order (no
 * atomics, no reduction whose order depends on the split): the bits do not
 * depend on the thread count. "+=" accumulates into the caller's buffer. */

/* C = [C +] A B (bc_mm, bc_dispatch.h) on the context's table. */
void bc_k_mm(const bc_mm *m, const bc_ctx *cx);

/* dx (N,C) [+]= dy (N,OC) @ w (OC,C), w in layout wf (BC_WF_ROWS or BC_WF_PANEL(BC_DTYPE_F32)) */
void bc_k_linear_dx(float *dx, const float *dy, const void *w, int wf, size_t n, size_t c,
                    size_t oc, int accumulate, const bc_ctx *cx);

/* dw (OC,C) in layout wf (BC_WF_ROWS or BC_WF_PANEL(BC_DTYPE_F32)) += dy (N,OC)^T @ x (N,C) */
void bc_k_linear_dw(float *dw, int wf, const float *dy, const float *x, size_t n, size_t c,
                    size_t oc, const bc_ctx *cx);

/* db (OC) += the sum over rows of dy (N,OC), rows in order */
void bc_k_colsum(float *db, const float *dy, size_t n, size_t oc, const bc_ctx *cx);

/* dx (N,C) = the gradient through the norm of x (N,C) given dy (N,C) (gain g
 * or NULL, as forward); dg, db (C) += the gain's and shift's (NULL: not wanted).
 * work: N*C floats. dx may be dy. */
void bc_k_rmsnorm_bwd(float *dx, float *dg, const float *dy, const float *x, const float *g,
                      size_t n, size_t c, float eps, float *work, const bc_ctx *cx);
void bc_k_layernorm_bwd(float *dx, float *dg, float *db, const float *dy, const float *x,
                        const float *g, size_t n, size_t c, float eps, float *work,
                        const bc_ctx *cx);

/* dx (n) = dy * act'(x) (dx may be dy); dgate, dup (n) of y = silu(gate) * up */
void bc_k_act_bwd(float *dx, const float *dy, const float *x, size_t n, int kind,
                  const bc_ctx *cx);
void bc_k_swiglu_bwd(float *dgate, float *dup, const float *dy, const float *gate,
                     const float *up, size_t n, const bc_ctx *cx);

/* x (T, .) rotated back: the transpose of bc_k_rope (the gradient through it) */
void bc_k_rope_bwd(float *x, size_t ldx, size_t t, size_t n_heads, size_t d_head,
                   const float *cs, const bc_ctx *cx);

/* The gradients of one sequence's attention (bc_attn_bwd, bc_dispatch.h; its
 * dsum member is computed here into dsum (H, T)). */
void bc_k_attention_bwd(bc_attn_bwd *a, float *dsum, const bc_ctx *cx);

#endif

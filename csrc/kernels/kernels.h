/* kernels.h: the internal compute kernels shared by the dynamic engine and the GPT.
 *
 * Not part of the public API (no validation here: public entry points validate
 * sizes and pointers before calling in). Row-major float32 throughout. Every
 * kernel runs on the context of its entry-point call (bc_rt.h: the kernel
 * table, the thread cap, the scratch), takes it last, allocates nothing and
 * cannot fail. These are the seams the fast path optimises: signatures stay,
 * implementations change.
 */
#ifndef BC_KERNELS_H
#define BC_KERNELS_H

#include <stddef.h>
#include "bc_engine.h"  /* BC_ACT_* */
#include "bc_rt.h"

/* The identity activation (for the fused linear epilogue). */
#define BC_ACT_NONE (-1)

/* y (N,OC) = act(r (N,OC) + x (N,C) @ w (OC,C)^T + b (OC)).
 * r may be NULL, or exactly y (an in-place residual); b may be NULL;
 * act is BC_ACT_GELU_TANH, BC_ACT_GELU, BC_ACT_RELU, BC_ACT_SILU or BC_ACT_NONE.
 * y must not alias x or w. Up to BC_ROWS_MAX rows (decoding) the weights are
 * streamed once, else packed; the same bits either way. */
void bc_k_linear(float *y, const float *x, const float *w, const float *b, const float *r,
                 size_t n, size_t c, size_t oc, int act, const bc_ctx *cx);

/* Multi-head scaled dot-product attention for one sequence.
 * out (Tq, H*Dh), row stride ldo; q (Tq, .) row stride ldq, head h at column h*Dh;
 * k (Tk, .) row stride ldk; v (Tk, .) row stride ldv.
 * Query i sits at position q_pos0 + i and key j at position j; with causal != 0,
 * keys at positions after the query's are masked. Scores are q.k / sqrt(Dh).
 * cx must have scratch for heads of Dh (bc_rt_ctx(cx, d_head)).
 * Never holds more than a tile of scores: no (Tq, Tk) matrix, for any head. */
void bc_k_attention(float *out, size_t ldo,
                    const float *q, size_t ldq,
                    const float *k, size_t ldk,
                    const float *v, size_t ldv,
                    size_t tq, size_t tk, size_t n_heads, size_t d_head,
                    size_t q_pos0, int causal, const bc_ctx *cx);

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

#endif

/* kernels.h: the internal compute kernels shared by the dynamic engine and the GPT.
 *
 * Not part of the public API (no validation here: public entry points validate
 * sizes and pointers before calling in). Row-major float32 throughout. These
 * are the seams the fast path optimises: signatures stay, implementations change.
 */
#ifndef BC_KERNELS_H
#define BC_KERNELS_H

#include <stddef.h>

/* y (N,OC) = x (N,C) @ w(OC,C)^T + b(OC); b may be NULL. y must not alias x or w. */
void bc_k_linear(float *y, const float *x, const float *w, const float *b,
                 size_t n, size_t c, size_t oc);

/* The linear with its epilogue fused: y (N,OC) = act(r (N,OC) + x @ w^T + b).
 * r may be NULL, or exactly y (an in-place residual); b may be NULL;
 * act is BC_ACT_GELU_TANH, BC_ACT_GELU, BC_ACT_RELU, BC_ACT_SILU or BC_ACT_NONE.
 * y must not alias x or w. */
void bc_k_linear_ex(float *y, const float *x, const float *w, const float *b,
                    const float *r, size_t n, size_t c, size_t oc, int act);

/* bc_k_linear_ex for a few rows (decoding one token per sequence): streams w once
 * for all n rows instead of packing it; bit for bit the result of bc_k_linear_ex
 * (it falls back to it for n > 4 or without AVX2). Same contract otherwise.
 * Faster than the packed GEMM up to n = 3 (memory-bound: ~12 GB/s a core). */
void bc_k_linear_rows(float *y, const float *x, const float *w, const float *b,
                      const float *r, size_t n, size_t c, size_t oc, int act);

/* Multi-head scaled dot-product attention for one sequence.
 * out (Tq, H*Dh), row stride ldo; q (Tq, .) row stride ldq, head h at column h*Dh;
 * k (Tk, .) row stride ldk; v (Tk, .) row stride ldv.
 * Query i sits at position q_pos0 + i and key j at position j; with causal != 0,
 * keys at positions after the query's are masked. Scores are q.k / sqrt(Dh).
 * work: bc_k_attention_work(tq, tk, n_heads, d_head) floats of scratch (it
 * may be 0, and work NULL: the kernel keeps its own small per-thread tiles).
 * Never holds more than a tile of scores: no (Tq, Tk) matrix, for any head. */
size_t bc_k_attention_work(size_t tq, size_t tk, size_t n_heads, size_t d_head);
void bc_k_attention(float *out, size_t ldo,
                    const float *q, size_t ldq,
                    const float *k, size_t ldk,
                    const float *v, size_t ldv,
                    size_t tq, size_t tk, size_t n_heads, size_t d_head,
                    size_t q_pos0, int causal, float *work);

/* Row norms over the last axis. x, y (N,C); gain g (C) and shift b (C) may be NULL.
 * rms:   y = x / sqrt(mean(x^2) + eps) * g
 * layer: y = (x - mean) / sqrt(var + eps) * g + b, var over C (not C-1). */
void bc_k_rmsnorm(float *y, const float *x, const float *g, size_t n, size_t c, float eps);
void bc_k_layernorm(float *y, const float *x, const float *g, const float *b,
                    size_t n, size_t c, float eps);

/* Elementwise activations, y (n) = act(x (n)); y may alias x. */
#define BC_ACT_NONE (-1)  /* the identity (for the fused linear epilogue) */
#define BC_ACT_GELU_TANH 0
#define BC_ACT_GELU 1
#define BC_ACT_RELU 2
#define BC_ACT_SILU 3
#define BC_ACT_SWIGLU 4   /* block-level option: down(silu(gate(x)) * up(x)) */
void bc_k_act(float *y, const float *x, size_t n, int kind);

/* y (n) = silu(gate (n)) * up (n); y may alias either. */
void bc_k_swiglu(float *y, const float *gate, const float *up, size_t n);

/* y (n) = a (n) + b (n); y may alias a or b. */
void bc_k_add(float *y, const float *a, const float *b, size_t n);

#endif

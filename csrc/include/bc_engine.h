/* bc_engine.h: the dynamic engine. Validated kernels one by one (ops.c) and
 * the general transformer block and stack at runtime sizes (block.c).
 *
 * Every entry point returns BC_OK or a BC_E* status (bc_core.h), checks its
 * pointers and sizes first (size products are overflow-checked against
 * BC_MAX_ELEMENTS) and writes nothing when it fails. Row-major float32.
 * The only memory the library allocates is the kernels' per-thread scratch,
 * taken (grown once and kept) before anything is written: BC_ENOMEM when it
 * cannot be had.
 */
#ifndef BC_ENGINE_H
#define BC_ENGINE_H

#include <stddef.h>
#include "bc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation kinds (the same values as the internal kernels use). */
#define BC_ACT_GELU_TANH 0
#define BC_ACT_GELU 1
#define BC_ACT_RELU 2
#define BC_ACT_SILU 3
#define BC_ACT_SWIGLU 4

/* Normalisation kinds and placements of the block. */
#define BC_NORM_RMS 0
#define BC_NORM_LAYER 1
#define BC_NORM_NONE 2
#define BC_PLACE_PRE 0
#define BC_PLACE_POST 1

/* ---- single kernels ---------------------------------------------------- */

/* y (N,OC) = x (N,C) @ w (OC,C)^T + b (OC); b may be NULL.
 * y must not overlap x, w or b (BC_EALIAS). */
int bc_linear(float *y, const float *x, const float *w, const float *b,
              size_t n, size_t c, size_t oc);

/* y (N,C) = x / sqrt(mean(x^2) + eps) * g; g (C) may be NULL. y may be x. */
int bc_rmsnorm(float *y, const float *x, const float *g, size_t n, size_t c, float eps);

/* y (N,C) = (x - mean) / sqrt(var + eps) * g + b, var over C (not C-1);
 * g (C) and b (C) may be NULL. y may be x. */
int bc_layernorm(float *y, const float *x, const float *g, const float *b,
                 size_t n, size_t c, float eps);

/* Scaled dot-product attention, out (B,H,Tq,Dh) = softmax(q k^T / sqrt(Dh)) v
 * for q (B,H,Tq,Dh), k (B,H,Tk,Dh), v (B,H,Tk,Dh). With causal != 0, query i
 * sees keys 0..i (top-left aligned, as torch's is_causal); a query with no
 * visible key gets zeros. out must not overlap q, k or v. */
int bc_attention(float *out, const float *q, const float *k, const float *v,
                 size_t b, size_t h, size_t tq, size_t tk, size_t dh, int causal);

/* y (n) = act(x (n)), kind BC_ACT_GELU_TANH, _GELU (exact erf), _RELU, _SILU.
 * y may be x. */
int bc_activation(float *y, const float *x, size_t n, int kind);

/* y (n) = silu(gate (n)) * up (n). y may be gate or up. */
int bc_swiglu(float *y, const float *gate, const float *up, size_t n);

/* y (n) = a (n) + b (n). y may be a or b. */
int bc_residual_add(float *y, const float *a, const float *b, size_t n);

/* ---- the block ---------------------------------------------------------- */

/* Runtime shape and options of one block. */
typedef struct {
    size_t d_model;   /* D */
    size_t n_heads;   /* H, divides D; Dh = D / H */
    size_t d_ff;      /* F */
    int norm;         /* BC_NORM_RMS, BC_NORM_LAYER or BC_NORM_NONE */
    int placement;    /* BC_PLACE_PRE or BC_PLACE_POST */
    int activation;   /* BC_ACT_GELU_TANH, _GELU, _RELU or _SWIGLU */
    int causal;       /* mask keys after the query */
    int residual;     /* add the sublayer input back */
    float eps;        /* norm epsilon, finite and >= 0 */
} bc_block_config;

/* The weights of one block, named like the chapter-6 GPTBlock state dict.
 * Every pointer may be NULL except qkv_w, proj_w, up_w, down_w (and gate_w
 * with swiglu); NULL means the part is absent (no bias, unit gain, no shift). */
typedef struct {
    const float *qkv_w;   /* attn.qkv.weight (3D,D): Q, K, V stacked by rows */
    const float *qkv_b;   /* attn.qkv.bias (3D) */
    const float *proj_w;  /* attn.proj.weight (D,D) */
    const float *proj_b;  /* attn.proj.bias (D) */
    const float *up_w;    /* up.weight (F,D) */
    const float *up_b;    /* up.bias (F) */
    const float *gate_w;  /* gate.weight (F,D), swiglu only */
    const float *gate_b;  /* gate.bias (F), swiglu only */
    const float *down_w;  /* down.weight (D,F) */
    const float *down_b;  /* down.bias (D) */
    const float *ln1_w;   /* ln1.weight (D): gain of the first norm */
    const float *ln1_b;   /* ln1.bias (D): shift of the first norm (layer only) */
    const float *ln2_w;   /* ln2.weight (D) */
    const float *ln2_b;   /* ln2.bias (D) */
} bc_block_weights;

/* *n_floats: the workspace one bc_block_forward / bc_stack_forward call
 * needs for b sequences of t positions. */
int bc_block_workspace_size(size_t *n_floats, const bc_block_config *cfg, size_t b, size_t t);

/* y (B,T,D) = block(x (B,T,D)). y may be x itself (in place) but must not
 * otherwise overlap it. work: at least bc_block_workspace_size floats,
 * not overlapping x or y. *cfg is read once, at entry; the weight structs
 * and the arrays they point to must stay valid for the whole call. */
int bc_block_forward(float *y, const float *x, const bc_block_config *cfg,
                     const bc_block_weights *w, size_t b, size_t t,
                     float *work, size_t work_len);

/* y (B,T,D) = block n-1 ( ... block 0 (x (B,T,D))), w: n_blocks weight sets.
 * hidden (n_blocks,B,T,D) may be NULL; if given, hidden[i] is the state
 * after block i. y may be x; hidden must not overlap x, y or work. */
int bc_stack_forward(float *y, float *hidden, const float *x, const bc_block_config *cfg,
                     const bc_block_weights *w, size_t n_blocks, size_t b, size_t t,
                     float *work, size_t work_len);

#ifdef __cplusplus
}
#endif

#endif

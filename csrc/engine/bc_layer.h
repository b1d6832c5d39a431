/* bc_layer.h: INTERNAL. One transformer layer at runtime sizes, every variant
 * the chapters and the checkpoints use, on the shared kernels: the dynamic
 * block (block.c) and every layer of the whole model (gpt.c) run this.
 *
 * pre:  x = x + attn(norm1(x));  x = x + ffn(norm2(x))
 * post: x = norm1(x + attn(x));  x = norm2(x + ffn(x))      (the 2017 original)
 * sandwich: x = x + norm1p(attn(norm1(x)));  x = x + norm2p(ffn(norm2(x)))  (Gemma 2/3)
 * output:   x = x + norm1(attn(x));  x = x + norm2(ffn(x))                  (OLMo2)
 * residual = 0 drops the "x +". attn: one packed linear to q (H heads), k and v
 * (KV heads each, grouped-query when KV < H), rotary embeddings on q and k
 * (rope), the keys and values stored into a cache when there is one,
 * attention (query head h reads K/V head h / (H/KV)), then the output
 * projection. ffn: down(act(up(x))), or down(silu(gate(x)) * up(x)) (swiglu).
 * Every check is the caller's; this only computes.
 */
#ifndef BC_LAYER_H
#define BC_LAYER_H

#include <stddef.h>
#include "bc_parallel.h"

typedef struct {
    size_t d;          /* D: the residual stream's width */
    size_t heads;      /* H query heads */
    size_t kv_heads;   /* KV heads of K and V (divides H) */
    size_t head_dim;   /* Dh (even with rope) */
    size_t d_ff;       /* F */
    int norm;          /* BC_NORM_* */
    int placement;     /* BC_PLACE_* */
    int activation;    /* BC_ACT_GELU_TANH, _GELU, _RELU or _SWIGLU */
    int causal;
    int residual;
    float eps;
    /* the families' variants (bc_gpt.h; zero: none): */
    size_t rope_dim;       /* rotated dimensions of each head (0: Dh) */
    int qk_norm;           /* BC_QK_NORM_* (bc_gpt.h) */
    float q_scale;         /* 0, or q multiplied by this before the attention */
    float residual_scale;  /* 0 (1), or x + this * sublayer */
    /* a mixture of experts in place of the MLP (bc_gpt.h; 0: the dense MLP) */
    size_t n_experts;      /* E */
    size_t n_used;         /* K, 1..E */
    int router_norm;       /* the K weights renormalised */
    float attn_softcap;    /* 0, or the scores soft-capped at this (bc_kv's softcap) */
} bc_layer_cfg;

/* A weight matrix: its data and layout (BC_WF_*). */
typedef struct {
    const void *p;
    int wf;
} bc_mat;

/* One layer's weights: qkv ((H + 2 KV) Dh, D), proj (D, H Dh), up and gate
 * (F, D), down (D, F); every vector may be NULL (absent: no bias, unit gain,
 * no shift), gate only with swiglu. qkv_k.p NULL: qkv is one matrix; else qkv
 * holds only the q rows (H Dh, D), qkv_k the k rows and qkv_v the v rows
 * (KV Dh, D each), each in its own format (a file's mixed types). */
typedef struct {
    bc_mat qkv, proj, up, gate, down;
    const float *qkv_b, *proj_b, *up_b, *gate_b, *down_b;
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    const float *q_norm, *k_norm;     /* qk_norm's gains */
    const float *ln1p_w, *ln2p_w;     /* BC_PLACE_SANDWICH's post norms' gains */
    /* experts (n_experts > 0): router (E, D) float32 rows; expert e's up, gate (F, D)
     * and down (D, F) at eup.p + e * eup_bytes (and likewise), in the formats given */
    const float *router;
    bc_mat eup, egate, edown;
    size_t eup_bytes, egate_bytes, edown_bytes;
    bc_mat qkv_k, qkv_v;              /* a split qkv's k and v rows (see above) */
} bc_layer_w;

/* Where this call's positions sit: sequence s's first position pos0[s] (pos0
 * NULL: 0 for every sequence), the rotary angles of each sequence's T
 * positions (cs: (B, T, Dh/2, 2), bc_k_rope_table; NULL: no rotary
 * embeddings), and the cache (NULL k and v: no cache, keys and values are the
 * call's own). Sequence s's cache starts seq_stride floats after sequence
 * s-1's and holds, for each K/V head in turn, cap positions (cap a multiple of
 * BC_ATT_BK): the keys transposed in tiles of BC_ATT_BK (bc_kv's tiled
 * layout), the values as rows of Dh. The call's positions are stored at
 * pos0[s]..pos0[s]+T-1, and attention reads positions 0..pos0[s]+T-1. */
typedef struct {
    const size_t *pos0;
    const float *cs;
    float *k, *v;
    size_t seq_stride, cap;
    uint16_t *k16, *v16;  /* a half cache, in place of k and v: the same layout in IEEE
                           * halves (strides in elements), each stored key and value
                           * rounded to nearest, saturating at +-65504 */
    size_t window;        /* 0: every earlier position; else W: position p's query sees
                           * keys p-W+1..p, and when cap is smaller than the positions
                           * (a ring) position p sits at slot p mod cap */
    unsigned char *kq, *vq; /* a quantised cache, in place of k and v: keys and values
                             * both as rows of Dh (a multiple of 32), stored in
                             * kq_dtype's blocks (bc_format.h; strides in elements,
                             * bc_kvq_bytes of them) */
    int kq_dtype;           /* BC_DTYPE_Q8_0 or BC_DTYPE_Q4_0 with kq */
} bc_layer_pos;

/* What a training forward keeps of one layer for the backward (N = B*T rows):
 *   x    (N,D)            the layer's input (the caller's: the layer only reads it)
 *   a1   (N,D)            pre with a norm: norm1(x), the attention's input
 *   qkv  (N,(H+2KV)Dh)    the projections, q and k after rotary embeddings
 *   att  (N,H Dh)         the attention's output, before the output projection
 *   lse  (B,H,T)          its log-sum-exps
 *   mid  (N,D)            pre: x1 = x + attn(...), the MLP's residual; post: s1,
 *                         the sum norm1 normalises
 *   x1   (N,D)            post: norm1(s1), the MLP's input
 *   a2   (N,D)            pre with a norm: norm2(x1), the MLP's input
 *   up   (N,F)            the up projection before the activation
 *   gate (N,F)            swiglu: the gate projection
 *   hid  (N,F)            the activation's output, the down projection's input
 *   s2   (N,D)            post: the sum norm2 normalises
 * Parts a config does not have are NULL. */
typedef struct {
    const float *x;
    float *a1, *qkv, *att, *lse, *mid, *x1, *a2, *up, *gate, *hid, *s2;
} bc_layer_rec;

/* One layer's parameter gradients, laid out as its weights (a matrix in its
 * bc_mat layout: BC_WF_ROWS or BC_WF_PANEL(BC_DTYPE_F32)); NULL where it has none. The
 * backward adds into them. */
typedef struct {
    float *qkv, *proj, *up, *gate, *down;
    float *qkv_b, *proj_b, *up_b, *gate_b, *down_b;
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
} bc_layer_g;

/* Floats of workspace bc_layer_moe needs for n rows; BC_OK or BC_EOVERFLOW. */
int bc_layer_moe_work(size_t *n_floats, const bc_layer_cfg *c, size_t n);

/* out (N,D) = r + the mixture of experts (bc_gpt.h) of a (N,D); r (N,D) or NULL, may be
 * out (not a). work: bc_layer_moe_work floats. Each row's bits are its own, whatever
 * the other rows and the threads. */
void bc_layer_moe(float *out, const float *a, const float *r, const bc_layer_cfg *c,
                  const bc_layer_w *w, size_t n, float *work, const bc_ctx *cx);

/* Floats of workspace bc_layer_forward needs for n = B*T rows; BC_OK or BC_EOVERFLOW. */
int bc_layer_work(size_t *n_floats, const bc_layer_cfg *c, size_t n);

/* y (B,T,D) = the layer applied to x (B,T,D); y may be x. With a record (not
 * NULL; then y may not be x), the intermediates are kept there, with the same
 * bits as without. */
void bc_layer_forward(float *y, const float *x, const bc_layer_cfg *c, const bc_layer_w *w,
                      const bc_layer_pos *pos, size_t b, size_t t, float *work,
                      const bc_layer_rec *rec, const bc_ctx *cx);

/* Floats of one layer's record for n = B*T rows (b sequences), and of the
 * workspace bc_layer_backward needs; BC_OK or BC_EOVERFLOW. */
int bc_layer_rec_size(size_t *n_floats, const bc_layer_cfg *c, size_t b, size_t t);
int bc_layer_bwd_work(size_t *n_floats, const bc_layer_cfg *c, size_t b, size_t t);

/* The record's parts, carved from rec_buf (bc_layer_rec_size floats); x is the caller's. */
bc_layer_rec bc_layer_rec_carve(float *rec_buf, const float *x, const bc_layer_cfg *c,
                                size_t b, size_t t);

/* dx (B,T,D) = the gradient of the layer's input given dy (B,T,D), the
 * gradient of its output (dx may be dy); g += the parameter gradients. rec:
 * the record of this layer's training forward; pos: its rotary angles (cs)
 * only. work: bc_layer_bwd_work floats. */
void bc_layer_backward(float *dx, const float *dy, const bc_layer_cfg *c, const bc_layer_w *w,
                       const bc_layer_g *g, const bc_layer_pos *pos, const bc_layer_rec *rec,
                       size_t b, size_t t, float *work, const bc_ctx *cx);

#endif

/* bc_gpt.h: the whole decoder-only model: inference and training.
 *
 *   ids (B,T) -> token embedding (+ learned position embedding) -> L layers
 *             -> final norm (pre-norm models) -> head (tied to the token
 *             embedding or not) -> logits (B,T,V)
 *
 * Each layer is chapter 24's block with every option (bc_engine.h's block,
 * plus what checkpoints add): the norm (LayerNorm, RMSNorm, none) before the
 * sublayers (pre) or after the sums (post), residuals on or off, attention
 * with H query heads and KV <= H key/value heads (grouped-query attention)
 * of Dh dimensions, rotary position embeddings on q and k or learned
 * positions, an MLP down(act(up(x))) or SwiGLU down(silu(gate(x)) * up(x))
 * of width F, biases on the q/k/v, output and MLP projections or not.
 * Chapter 6's GPT-2 is one point: LayerNorm, pre, learned positions, GELU-tanh,
 * F = 4D, KV = H, every bias. Llama is another: RMSNorm, RoPE, SwiGLU, no bias.
 *
 * Parameters live in ONE buffer owned by the caller, whose layout (every
 * tensor's name, byte offset, storage type and shape) the library gives
 * (bc_gpt_tensor_info), in the chapter's state_dict order:
 *   token.weight (V,D), position.weight (C,D) (learned positions only), then
 *   for each layer i, named blocks.i.*:
 *     ln1.weight (D), ln1.bias (D)          norm 1: gain (rms, layer), shift (layer)
 *     attn.qkv.weight ((H+2KV) Dh, D)       q, k, v stacked by rows
 *     attn.qkv.bias ((H+2KV) Dh)            with qkv_bias
 *     attn.proj.weight (D, H Dh), attn.proj.bias (D)   the bias with out_bias
 *     ln2.weight (D), ln2.bias (D)
 *     up.weight (F,D), up.bias (F)          the bias with mlp_bias
 *     gate.weight (F,D), gate.bias (F)      swiglu only
 *     down.weight (D,F), down.bias (D)
 *     (with n_experts E > 0, in place of up, gate and down: router.weight (E,D)
 *     float32 rows, then experts.e.up.weight (F,D) for e < E, every
 *     experts.e.gate.weight (F,D), every experts.e.down.weight (D,F))
 *   norm.weight (D), norm.bias (D)          the final norm (pre-norm, norm != none)
 *   head.weight (V,D)                       untied only (a tied head reads token.weight)
 * The matrices (every 2-D tensor but the position table) are stored packed
 * (bc_engine.h's bc_pack) in the config's dtype, or each in its own format
 * (the config's dtypes); vectors and the position table are float32. Tensors
 * follow each other with no padding (every size is a multiple of 4 bytes).
 */
#ifndef BC_GPT_H
#define BC_GPT_H

#include <stddef.h>
#include <stdint.h>
#include "bc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Token id element types accepted by bc_gpt_forward. */
#define BC_IDS_INT32 32
#define BC_IDS_INT64 64

/* Longest tensor name bc_gpt_tensor_info writes, terminating NUL included. */
#define BC_GPT_NAME_MAX 64

/* One storage format per matrix (bc_gpt_config.dtypes): entry BC_GPT_FMT_TOKEN
 * is token.weight's, BC_GPT_FMT_HEAD head.weight's (read only when untied),
 * and layer l's matrix k (BC_GPT_MAT_*) is entry BC_GPT_FMT_LAYER(l, k)
 * (gate read only with SwiGLU): BC_GPT_NFMT(L) entries, each a BC_DTYPE_*. A
 * model of more than BC_GPT_FMT_LAYERS layers is stored in one dtype.
 * attn.qkv.weight has three entries: BC_GPT_MAT_QKV its q rows' format,
 * BC_GPT_MAT_QKV_K its k rows', BC_GPT_MAT_QKV_V its v rows' (a GGUF file's
 * attn_q, attn_k and attn_v may be of different types: Q4_K_M's attn_v is Q6_K
 * in some layers). When the three are one format the matrix is one packed
 * matrix; else it is three, one after another (its q rows packed in their
 * format, then its k rows in theirs, then its v rows), each multiplied in its
 * own format. */
#define BC_GPT_MAT_QKV 0
#define BC_GPT_MAT_PROJ 1
#define BC_GPT_MAT_UP 2
#define BC_GPT_MAT_GATE 3
#define BC_GPT_MAT_DOWN 4
#define BC_GPT_MAT_QKV_K 5
#define BC_GPT_MAT_QKV_V 6
#define BC_GPT_NMAT 7
#define BC_GPT_FMT_TOKEN 0
#define BC_GPT_FMT_HEAD 1
#define BC_GPT_FMT_LAYER(l, k) (2 + (l) * BC_GPT_NMAT + (k))
#define BC_GPT_NFMT(layers) (2 + (layers) * BC_GPT_NMAT)
#define BC_GPT_FMT_LAYERS 1024

/* Position encodings. */
#define BC_POS_LEARNED 0
#define BC_POS_ROPE 1

typedef struct {
    size_t vocab;      /* V: vocabulary size */
    size_t context;    /* C: the longest sequence (rows of a learned position table) */
    size_t width;      /* D: residual stream width */
    size_t heads;      /* H: query heads */
    size_t layers;     /* L: blocks */
    size_t kv_heads;   /* KV: key/value heads, dividing H (0: H) */
    size_t head_dim;   /* Dh (0: D / H, which H must then divide) */
    size_t d_ff;       /* F: the MLP's width (0: 4 D) */
    int norm;          /* BC_NORM_LAYER, BC_NORM_RMS or BC_NORM_NONE (bc_engine.h) */
    int placement;     /* BC_PLACE_PRE or BC_PLACE_POST */
    int activation;    /* BC_ACT_GELU_TANH, BC_ACT_GELU, BC_ACT_RELU or BC_ACT_SWIGLU */
    int positions;     /* BC_POS_LEARNED or BC_POS_ROPE (Dh even) */
    float rope_theta;  /* RoPE base (> 0, finite), with BC_POS_ROPE */
    int residual;      /* nonzero: x + sublayer (zero drops the residuals) */
    int qkv_bias;      /* nonzero: attn.qkv.bias */
    int out_bias;      /* nonzero: attn.proj.bias */
    int mlp_bias;      /* nonzero: up, gate and down biases */
    float eps;         /* norm epsilon (>= 0, finite) */
    int tie_weights;   /* nonzero: the head is token.weight */
    int dtype;         /* a BC_DTYPE_* with a format (bc_dtype_info): the matrices' storage */
    const int *dtypes; /* NULL: every matrix in dtype; else BC_GPT_NFMT(layers) BC_DTYPE_*
                        * (see BC_GPT_FMT_*), one per matrix, each read once per call
                        * into the library's own copy (dtype must still be one) */
    /* ---- the checkpoint families' variants (issue 50); every one zero is the model
     * above. Training (bc_gpt_grad) refuses a config using any (BC_EOPTION). ---- */
    /* rotary: each head's first R = rope_dim dimensions turn (rotate-half within them:
     * pairs (i, i + R/2)), the rest pass unchanged; pair i of a sequence's position p
     * turns by p * f_i, cos and sin multiplied by rope_attn (0: 1). f: rope_freqs (R/2
     * floats, each finite and > 0) or, NULL, theta^(-2i/R) (float32, as transformers);
     * for a sequence whose length after the call (first position + T) exceeds
     * rope_original, rope_freqs_long instead when not NULL (longrope), or, with
     * rope_dynamic > 0 (dynamic NTK, factor rope_dynamic), theta^(-2i/R) of the base
     * theta * (rope_dynamic * len / rope_original - (rope_dynamic - 1))^(R / (R - 2)),
     * every step in float32 as transformers takes it. The tables are read once per call. */
    size_t rope_dim;               /* R: even, <= Dh (0: Dh) */
    const float *rope_freqs;       /* NULL or (R/2) */
    const float *rope_freqs_long;  /* NULL or (R/2), with rope_original > 0 */
    float rope_dynamic;            /* 0, or the dynamic factor (>= 1, with rope_original > 0, R > 2) */
    size_t rope_original;          /* the length beyond which the long frequencies apply */
    float rope_attn;               /* 0 (1), or the factor on cos and sin (finite, > 0) */
    const unsigned char *nope_layers;  /* NULL, or (L) per layer, read once per call: 0 the
                                        * rotary above, 1 none (SmolLM3's NoPE layers), 2
                                        * theta^(-2i/Dh) of base rope_local_theta over the
                                        * whole head, unscaled (Gemma 3's sliding layers) */
    float rope_local_theta;  /* 0, or the base of the layers marked 2 (finite, > 0;
                              * then rope_dim is 0 or Dh) */
    int qk_norm;        /* BC_QK_NORM_* (bc_engine.h): RMSNorm (the model's eps) of q and k after their
                         * projection, before rotary: per head (gains attn.q_norm.weight
                         * (Dh), attn.k_norm.weight (Dh)) or over the whole projection
                         * (gains (H Dh) and (KV Dh)) */
    float embed_scale;  /* 0 (1), or the embedding multiplied by this (finite, > 0) */
    float residual_scale;  /* 0 (1), or x + this * sublayer (finite, > 0) */
    float attn_scale;   /* 0 (1/sqrt(Dh)), or the scores' scale (finite, > 0): q is
                         * multiplied by attn_scale * sqrt(Dh) before the attention */
    float logit_scale;  /* 0 (1), or the logits divided by this (finite, > 0) */
    /* Soft-capping (Gemma 2), each 0 (none) or a cap c (finite, > 0): x becomes
     * c * tanh(x / c), in float32 (tanhf) */
    float attn_softcap;   /* on each attention score (scaled q . k), before the
                           * mask and the softmax */
    float logit_softcap;  /* on each logit, after logit_scale */
    /* Sliding-window attention (bc_gpt_window below). */
    size_t window;              /* W: 0, every layer attends to every earlier position; else
                                 * a sliding layer's query at position p sees p-W+1..p */
    const unsigned char *sliding; /* NULL: every layer slides (when window is set); else
                                 * (layers) flags, nonzero: that layer slides, zero: it
                                 * attends to every earlier position. Each read once per
                                 * call into the library's own copy (layers <=
                                 * BC_GPT_FMT_LAYERS when given) */
    /* Mixture of experts (Mixtral, Qwen3-MoE): with n_experts = E > 0 every layer's
     * MLP is E SwiGLU experts of width F (d_ff) and a router, in place of up, gate and
     * down (activation BC_ACT_SWIGLU, no mlp_bias). Each token's router logits
     * a (D) @ router.weight (E, D)^T go through a float32 softmax over all E; the K =
     * n_experts_used largest probabilities are its experts (ties: the lower index
     * first), each weighted by its probability, or by its probability over the K's
     * sum when router_norm (Mixtral; Qwen3-MoE's norm_topk_prob). The MLP's output is
     * sum over k of w_k down_e(silu(gate_e(a)) * up_e(a)), added in rank order k =
     * 0..K-1 (the most probable first), so a token's bits depend neither on the
     * batch nor on the threads; an expert no token of the call chose is not read.
     * The block's tensors become: router.weight (E, D) float32 rows (not packed),
     * then experts.e.up.weight (F, D) for e = 0..E-1, then every experts.e.gate.weight
     * (F, D), then every experts.e.down.weight (D, F), each a packed matrix in its
     * layer's up, gate and down format (BC_GPT_MAT_*). */
    size_t n_experts;       /* E: 0 (a dense MLP), or 2..BC_GPT_MAX_EXPERTS */
    size_t n_experts_used;  /* K: 0 without experts, else 1..E */
    int router_norm;        /* nonzero: the K weights renormalised to sum 1 */
} bc_gpt_config;

/* The most experts a layer may have. */
#define BC_GPT_MAX_EXPERTS 4096

/* ---- sliding-window attention and the ring cache -------------------------
 * A sliding layer's query at position p attends to keys p-W+1..p (W of them,
 * itself included: transformers' Mistral, Qwen2, Gemma 2/3 and Phi-3 masks).
 * Its cache keeps only the positions it can still read: a ring of
 * bc_gpt_ring_rows(W, capacity) positions per (sequence, K/V head), position p
 * at slot p mod R, so a long context costs W x sliding layers + context x the
 * other layers. R = min(capacity, W + 127) rounded up to 64: a prefill chunk
 * longer than the ring's slack (R - W + 1 positions) is attended in pieces of
 * that many queries, each piece's keys stored just before it is read. Bits:
 * a query's output depends only on the keys it sees, not on how the calls
 * were split nor on the ring. */
#define BC_GPT_RING_SLACK 127

/* rows: the positions one (sequence, K/V head) of a layer stores: capacity
 * rounded up to 64 for a global layer (window 0); for a sliding layer of window
 * W, the smaller of that and (W + BC_GPT_RING_SLACK) rounded up to 64 (a ring
 * when smaller). BC_ENULL (rows NULL), BC_EOVERFLOW (capacity past
 * BC_MAX_ELEMENTS); nothing written on an error. */
int bc_gpt_ring_rows(size_t *rows, size_t window, size_t capacity);

/* A KV cache, in caller-provided buffers. Without sliding layers each is
 * (B, L, KV, R, Dh) elements with R = capacity rounded up to a multiple of 64
 * (bc_gpt_cache_size): for sequence b, layer l, K/V head g the block at
 * ((b * L + l) * KV + g) * R * Dh holds (with sliding layers, layer l's rows are
 * R_l = bc_gpt_ring_rows, its blocks KV R_l Dh elements each, the layers one
 * after the other within a sequence, so sequence b starts at b * sum_l KV R_l Dh;
 * a ring layer's position p sits at slot p mod R_l) 
 *   k: the keys (after the rotary embedding) transposed in tiles of 64
 *      positions: position p, dimension d at (p / 64) * 64 Dh + d * 64 + p % 64;
 *   v: the values as rows: position p, dimension d at p * Dh + d.
 * (Decoding streams both as they lie.) A sequence's part is itself a cache of
 * batch 1 (at k + b * L * KV * R * Dh), so sequences can be filled one by one.
 * length: positions already stored, the same for every sequence; or, when
 * lengths is not NULL, lengths[b] for sequence b (length is then ignored):
 * each sequence continues at its own position. bc_gpt_forward stores the new
 * keys and values after the stored ones and advances length (or every
 * lengths[b]) by T.
 * dtype: the elements' type. BC_DTYPE_F32 (0): floats. BC_DTYPE_F16: IEEE
 * halves (uint16), half the memory and half the bytes a decoding step reads;
 * each key and value is stored rounded to nearest even, finite values past
 * the half range saturated at +-65504, and attention reads them back, the
 * call's own keys included: a sequence's logits are the same bits however its
 * tokens were split into calls, but not a float cache's (nor a forward without
 * a cache). BC_DTYPE_Q8_0, BC_DTYPE_Q4_0 (Dh a multiple of 32): each stored key
 * and value row (Dh values of one position and K/V head) quantised when written
 * in ggml's blocks of 32 (q8_0: a half scale and 32 int8, 34 bytes; q4_0: a half
 * scale and 32 nibbles, 18 bytes; a position's values as those blocks one after
 * another, its keys spread in tiles of 64 positions: the scales' rows, then the
 * values' rows of 64 lanes, as bc_format.h says; an element offset e above is
 * byte e / 32 * block bytes), read back a tile at a time by attention as exact
 * half(d) * q floats: 1.0625 and 0.5625 bytes a
 * value; the same bits however the tokens were split into calls and at any
 * thread count and batch. Anything else: BC_EOPTION. Buffers' bytes:
 * bc_gpt_cache_bytes. */
typedef struct {
    void *k;
    void *v;
    size_t batch;
    size_t capacity;  /* <= context */
    size_t length;    /* <= capacity */
    size_t *lengths;  /* NULL, or (batch) per-sequence lengths, each <= capacity */
    int dtype;        /* BC_DTYPE_F32, BC_DTYPE_F16, BC_DTYPE_Q8_0 or BC_DTYPE_Q4_0 */
} bc_gpt_cache;

/* Check a configuration: BC_OK, BC_ENULL, BC_ESIZE (a zero size), BC_EOPTION
 * (an unknown option, eps or rope_theta out of range, an odd Dh with RoPE, an
 * unknown dtype or dtypes entry, dtypes with more than BC_GPT_FMT_LAYERS layers),
 * BC_EHEADS (KV does not divide H, or H does not divide D when Dh is 0) or
 * BC_EOVERFLOW (the model is too large to address). */
int bc_gpt_config_check(const bc_gpt_config *cfg);

/* n: the model's parameter count (a tied head counted once). */
int bc_gpt_param_count(size_t *n, const bc_gpt_config *cfg);

/* n: bytes of the parameter buffer. */
int bc_gpt_param_bytes(size_t *n, const bc_gpt_config *cfg);

/* n: tensors in the layout. */
int bc_gpt_tensor_count(size_t *n, const bc_gpt_config *cfg);

/* Tensor number index of the layout: its state_dict name (NUL-terminated, into
 * name[name_cap], name_cap >= BC_GPT_NAME_MAX is always enough), byte offset
 * into the parameter buffer, its bytes, storage (BC_DTYPE_F32 for a float32
 * vector or the position table, else the config's dtype, packed), ndim (1 or
 * 2) and shape (shape[1] = 1 when ndim is 1). name may be NULL. BC_ERANGE
 * when index >= the tensor count. */
int bc_gpt_tensor_info(char *name, size_t name_cap, size_t *offset, size_t *bytes,
                       int *dtype, int *packed, size_t *ndim, size_t shape[2],
                       const bc_gpt_config *cfg, size_t index);

/* n: elements (of the cache's dtype) in each of its k and v buffers, batch * L * KV * R * Dh (R:
 * capacity rounded up to a multiple of 64; with sliding layers batch * sum_l KV R_l Dh,
 * R_l = bc_gpt_ring_rows).
 * BC_ECONTEXT when capacity > context, BC_ESIZE when batch or capacity is 0. */
int bc_gpt_cache_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t capacity);

/* n: bytes of each of a cache's k and v buffers of this dtype: bc_gpt_cache_size's
 * elements times 4 (BC_DTYPE_F32) or 2 (BC_DTYPE_F16), or / 32 times 34
 * (BC_DTYPE_Q8_0) or 18 (BC_DTYPE_Q4_0). Errors (nothing written): as
 * bc_gpt_cache_size, BC_ENULL, BC_EOPTION (another dtype, or a quantised one
 * with Dh not a multiple of 32), BC_EOVERFLOW. */
int bc_gpt_cache_bytes(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t capacity,
                       int dtype);

/* n: floats of workspace bc_gpt_forward needs for batch x seq tokens, with
 * cache (NULL: no cache; BC_ECONTEXT when seq exceeds its capacity). The size
 * does not depend on the cache's length, so one query serves a whole generation. */
int bc_gpt_workspace_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t seq,
                          const bc_gpt_cache *cache);

/* The forward pass.
 *   logits  (B,T,V), or (B,1,V) for the last position only when last_only != 0;
 *           NULL: no head.
 *   hidden  (L,B,T,D): the residual stream after every block; NULL: not wanted.
 *   cache   NULL, or a cache for batch B: positions start at cache->length (or
 *           sequence b's at cache->lengths[b], each read once), keys and values
 *           are appended, and the length(s) advance by T. Without a cache,
 *           positions are 0..T-1. Every sequence's logits are the bits it gets
 *           alone at its positions, whatever the other sequences.
 *   params  the parameter buffer (bc_gpt_param_bytes bytes, 4-byte aligned).
 *   ids     (B,T) token ids, int32 (ids_type BC_IDS_INT32) or int64 (BC_IDS_INT64).
 *           Each id is read once and checked as it is used: ids changed by
 *           another thread during the call never index outside the table.
 *   work    work_size floats, at least bc_gpt_workspace_size(...).
 * Errors (nothing written): BC_ENOMEM (the kernels' scratch), BC_ENULL, BC_ESIZE (B or T zero, cache batch mismatch,
 * a cache length > capacity), BC_EOPTION (ids_type, the cache's dtype), BC_ERANGE (an id outside [0,V)),
 * BC_ECONTEXT (start + T beyond the context or the cache's capacity, or capacity
 * beyond the context), BC_EOVERFLOW, BC_EWORKSPACE, BC_EALIAS (logits, hidden, work,
 * the cache's k and v and its lengths overlap each other, the parameters or the ids). */
int bc_gpt_forward(float *logits, float *hidden, bc_gpt_cache *cache,
                   const void *params, const bc_gpt_config *cfg,
                   const void *ids, int ids_type, size_t batch, size_t seq, int last_only,
                   float *work, size_t work_size);

/* ---- cache operations: prefix reuse, moving sequences between slots -------
 * On a cache laid out for cfg (its k, v, batch and capacity; per-sequence
 * lengths, or the shared length when lengths is NULL). A server keeps a
 * finished conversation's keys and values and continues the next turn from
 * them; these move a sequence's positions without recomputing them, so the
 * positions kept are the bits the forward pass wrote. Each reads the cache's
 * fields once and checks them as bc_gpt_forward does. */

/* Forget every position of sequence seq from n on (n <= its length): its
 * length becomes n, and the next forward continues at position n. With
 * lengths NULL the shared length is cut (every sequence).
 * Errors (nothing changed): BC_ENULL, BC_ESIZE (a zero batch or capacity, a
 * stored length past the capacity), BC_ECONTEXT (capacity past the context),
 * BC_ERANGE (seq >= batch, or n past the sequence's length), BC_EEVICTED (a
 * ring layer has already overwritten a position n's query would read:
 * 0 < n, R_l < length and n + R_l < length + W - 1). */
int bc_gpt_cache_truncate(bc_gpt_cache *cache, const bc_gpt_config *cfg, size_t seq, size_t n);

/* Copy the first n positions of sequence src (keys and values of every layer
 * and K/V head) into sequence dst and set dst's length to n: dst continues as
 * if it had computed them itself (the same bits, so the same logits after).
 * src's positions and every other sequence are unchanged; dst == src
 * truncates. Needs per-sequence lengths (lengths not NULL) unless batch is 1.
 * A ring layer copies its whole ring (the positions n reads, as they lie).
 * Errors (nothing changed): as bc_gpt_cache_truncate (BC_ERANGE: dst or src
 * >= batch, n past src's length; BC_EEVICTED as there, for src), BC_EOPTION
 * (lengths NULL with batch > 1),
 * BC_EALIAS (k, v and lengths overlap), BC_EOVERFLOW. */
int bc_gpt_cache_copy(bc_gpt_cache *cache, const bc_gpt_config *cfg, size_t dst, size_t src,
                      size_t n);

/* ---- training ------------------------------------------------------------
 * float32 weights only (every matrix BC_DTYPE_F32; anything else, a mixed model
 * included, is BC_EOPTION).
 * Gradients live in a buffer laid out as the parameters (bc_gpt_param_bytes
 * bytes: every tensor at its offset, a matrix's gradient packed as the matrix
 * is), so the optimizer updates the three buffers tensor by tensor, element by
 * element. Every result is the same bits at any thread count. */

/* n: floats of workspace bc_gpt_grad needs for batch x seq tokens. */
int bc_gpt_train_workspace_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t seq);

/* The next-token loss and its gradient.
 *   loss     the mean cross-entropy of softmax(logits) against targets over the
 *            positions whose target is not ignore_index (NaN when there are none);
 *   count    those positions (may be NULL);
 *   grads    NULL (the loss alone), or the gradient buffer: grads += dloss/dparams
 *            (zero it first for the plain gradient; adding lets batches accumulate);
 *   ids, targets  (B,T) of ids_type; each target in [0, V) or ignore_index.
 * The logits are never held whole: the head and the loss run a block of rows at
 * a time. Errors (nothing written): as bc_gpt_forward, BC_EOPTION (dtype not
 * float32), BC_ERANGE (a target outside [0, V) that is not ignore_index),
 * BC_EALIAS (grads overlapping the parameters, ids, targets or work). */
int bc_gpt_grad(float *loss, size_t *count, void *grads, const void *params,
                const bc_gpt_config *cfg, const void *ids, const void *targets, int ids_type,
                int64_t ignore_index, size_t batch, size_t seq, float *work, size_t work_size);

/* norm: the gradient buffer's global L2 norm (in double, tensors in layout order). */
int bc_gpt_grad_norm(double *norm, const void *grads, const bc_gpt_config *cfg);

/* Which tensors AdamW's weight decay applies to. */
#define BC_DECAY_MATRICES 0   /* every 2-D tensor (projections, embeddings, head), no vector */
#define BC_DECAY_ALL 1
#define BC_DECAY_NONE 2

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;  /* doubles, as torch's Python floats */
    int decay;          /* BC_DECAY_* */
    double grad_scale;  /* the gradients are multiplied by this first (clipping; 1: as they are) */
    size_t step;        /* this step's number, from 1 (the bias corrections) */
} bc_adamw_config;

/* One AdamW step over every tensor, as torch.optim.AdamW (decoupled decay):
 *   p = p (1 - lr wd);  m = m + (1 - b1)(g - m);  v = b2 v + (1 - b2) g^2;
 *   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * params, grads (bc_gpt_param_bytes bytes), m and v (as many bytes, float32,
 * zero before the first step). Errors (nothing written): BC_ENULL, BC_EOPTION
 * (dtype, decay, a non-finite or negative lr, eps or weight decay, betas outside
 * [0, 1), step 0), BC_EALIAS (any two buffers overlap). */
int bc_gpt_adamw(void *params, float *m, float *v, const void *grads, const bc_gpt_config *cfg,
                 const bc_adamw_config *opt);

#ifdef __cplusplus
}
#endif

#endif

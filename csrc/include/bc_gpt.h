/* bc_gpt.h: the whole GPT of chapter 6 (GPT-2 architecture), inference only.
 *
 *   ids (B,T) -> token embedding + position embedding -> L pre-norm blocks
 *             -> final LayerNorm -> head (tied to the token embedding or not)
 *             -> logits (B,T,V)
 *
 * Each block: x = x + proj(attn(qkv(ln1(x))));  x = x + down(gelu_tanh(up(ln2(x)))).
 *
 * Parameters live in ONE contiguous float32 buffer owned by the caller. The
 * library computes its size and the offset of every tensor (bc_gpt_tensor_info);
 * the order is the chapter's PyTorch state_dict order:
 *   token.weight (V,D), position.weight (C,D), then for each block i
 *   blocks.i.ln1.weight (D), blocks.i.ln1.bias (D),
 *   blocks.i.attn.qkv.weight (3D,D), blocks.i.attn.qkv.bias (3D),
 *   blocks.i.attn.proj.weight (D,D), blocks.i.attn.proj.bias (D),
 *   blocks.i.ln2.weight (D), blocks.i.ln2.bias (D),
 *   blocks.i.up.weight (4D,D), blocks.i.up.bias (4D),
 *   blocks.i.down.weight (D,4D), blocks.i.down.bias (D),
 *   then norm.weight (D), norm.bias (D), and head.weight (V,D) only when untied.
 * A tied head reads token.weight: one tensor, counted once.
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

typedef struct {
    size_t vocab;     /* V: vocabulary size */
    size_t context;   /* C: rows of the position table, the longest sequence */
    size_t width;     /* D: residual stream width */
    size_t heads;     /* H: attention heads, D % H == 0 */
    size_t layers;    /* L: blocks */
    float eps;        /* LayerNorm epsilon (>= 0, finite) */
    int tie_weights;  /* nonzero: the head is token.weight */
} bc_gpt_config;

/* A KV cache, in caller-provided buffers.
 * k, v: (L, B, capacity, D) each; layer l, row b, position p at
 * ((l * B + b) * capacity + p) * D. length: positions already stored (the same
 * for every row). bc_gpt_forward with a cache stores the new keys and values at
 * positions length .. length+T-1 and advances length by T. */
typedef struct {
    float *k;
    float *v;
    size_t batch;
    size_t capacity;  /* <= context */
    size_t length;    /* <= capacity */
} bc_gpt_cache;

/* Check a configuration: BC_OK, BC_ENULL, BC_ESIZE (a zero size), BC_EOPTION (eps
 * negative or not finite), BC_EHEADS (D % H != 0) or BC_EOVERFLOW (the model is
 * too large to address). */
int bc_gpt_config_check(const bc_gpt_config *cfg);

/* n: floats in the parameter buffer, i.e. the model's parameter count. */
int bc_gpt_param_count(size_t *n, const bc_gpt_config *cfg);

/* n: tensors in the layout (4 + 12 L tied, one more untied). */
int bc_gpt_tensor_count(size_t *n, const bc_gpt_config *cfg);

/* Tensor number index of the layout: its state_dict name (NUL-terminated, into
 * name[name_cap], name_cap >= BC_GPT_NAME_MAX is always enough), offset in floats
 * into the parameter buffer, ndim (1 or 2) and shape (shape[1] = 1 when ndim is 1).
 * name may be NULL. BC_ERANGE when index >= the tensor count. */
int bc_gpt_tensor_info(char *name, size_t name_cap, size_t *offset, size_t *ndim,
                       size_t shape[2], const bc_gpt_config *cfg, size_t index);

/* n: floats in each of the cache's k and v buffers, L * batch * capacity * D.
 * BC_ECONTEXT when capacity > context, BC_ESIZE when batch or capacity is 0. */
int bc_gpt_cache_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t capacity);

/* n: floats of workspace bc_gpt_forward needs for batch x seq tokens, with
 * cache (NULL: no cache; BC_ECONTEXT when seq exceeds its capacity). The size
 * does not depend on the cache's length, so one query serves a whole generation. */
int bc_gpt_workspace_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t seq,
                          const bc_gpt_cache *cache);

/* The forward pass.
 *   logits  (B,T,V), or (B,1,V) for the last position only when last_only != 0;
 *           NULL: no head.
 *   hidden  (L,B,T,D): the residual stream after every block; NULL: not wanted.
 *   cache   NULL, or a cache for batch B: positions start at cache->length,
 *           keys and values are appended, cache->length advances by T.
 *           Without a cache, positions are 0..T-1.
 *   params  the parameter buffer (bc_gpt_param_count floats).
 *   ids     (B,T) token ids, int32 (ids_type BC_IDS_INT32) or int64 (BC_IDS_INT64).
 *           Each id is read once and checked as it is used: ids changed by
 *           another thread during the call never index outside the table.
 *   work    work_size floats, at least bc_gpt_workspace_size(...).
 * Errors (nothing written): BC_ENOMEM (the kernels' scratch), BC_ENULL, BC_ESIZE (B or T zero, cache batch mismatch,
 * cache length > capacity), BC_EOPTION (ids_type), BC_ERANGE (an id outside [0,V)),
 * BC_ECONTEXT (start + T beyond the context or the cache's capacity, or capacity
 * beyond the context), BC_EOVERFLOW, BC_EWORKSPACE, BC_EALIAS (logits, hidden, work
 * and the cache's k and v overlap each other, the parameters or the ids). */
int bc_gpt_forward(float *logits, float *hidden, bc_gpt_cache *cache,
                   const float *params, const bc_gpt_config *cfg,
                   const void *ids, int ids_type, size_t batch, size_t seq, int last_only,
                   float *work, size_t work_size);

#ifdef __cplusplus
}
#endif

#endif

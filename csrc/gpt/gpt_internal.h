/* gpt_internal.h: INTERNAL. What gpt.c (the model, its layout and forward)
 * and train.c (its gradients and optimizer) share. */
#ifndef BC_GPT_INTERNAL_H
#define BC_GPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "bc_engine.h"
#include "bc_format.h"  /* a quantised cache's blocks */
#include "bc_gpt.h"
#include "bc_layer.h"

/* ---- the configuration, with its defaults resolved ---------------------- */

typedef struct {
    bc_gpt_config c;          /* a copy: the caller's struct is read once (c.dtypes NULL) */
    size_t kv, dh, ff;        /* KV heads, head dim, MLP width */
    size_t qw, kw;            /* H Dh, KV Dh */
    size_t rd;                /* R: the rotated dimensions of each head */
    int variant;              /* nonzero: the config uses a family variant (issue 50's
                               * fields of bc_gpt_config), which training refuses */
    int mixed;                /* nonzero: the matrices' formats are fmt, not c.dtype */
    unsigned char fmt[BC_GPT_NFMT(BC_GPT_FMT_LAYERS)];  /* the caller's dtypes, checked */
    /* sliding-window attention: c.window (0: none); every layer slides when
     * all_slide, else layer l when slide[l] (the caller's flags, read once) */
    int all_slide;
    unsigned char slide[BC_GPT_FMT_LAYERS];
} model;

/* ---- sliding windows and the ring cache (bc_gpt.h) ---------------------- */

/* Layer l's window: c.window when it slides, 0 when it sees every earlier position. */
static inline size_t bc_gpt_window(const model *m, size_t l)
{
    return m->c.window && (m->all_slide || m->slide[l]) ? m->c.window : 0;
}

/* n rounded up to whole tiles of BC_ATT_BK positions (n <= BC_MAX_ELEMENTS + 127). */
static inline size_t bc_gpt_tiles(size_t n)
{
    return (n + BC_ATT_BK - 1) / BC_ATT_BK * BC_ATT_BK;
}

/* bc_gpt_ring_rows: a window's ring, or the capacity in tiles when no smaller. */
static inline size_t bc_gpt_rows_of(size_t window, size_t capacity)
{
    const size_t all = bc_gpt_tiles(capacity);
    if (!window || window >= capacity)  /* then window < capacity <= BC_MAX_ELEMENTS */
        return all;
    const size_t ring = bc_gpt_tiles(window + BC_GPT_RING_SLACK);
    return ring < all ? ring : all;
}

/* Positions layer l's cache keeps per (sequence, K/V head) at this capacity. */
static inline size_t bc_gpt_layer_rows(const model *m, size_t l, size_t capacity)
{
    return bc_gpt_rows_of(bc_gpt_window(m, l), capacity);
}

/* The format of matrix slot `slot` (BC_GPT_FMT_*): its own, or the model's dtype. */
static inline int bc_gpt_fmt(const model *m, size_t slot)
{
    return m->mixed ? (int)m->fmt[slot] : m->c.dtype;
}

/* Every matrix stored as float32 (what training needs). */
static inline int bc_gpt_all_f32(const model *m)
{
    return !m->mixed && m->c.dtype == BC_DTYPE_F32;
}

/* What training computes: float32 matrices and none of the families' variants. */
static inline int bc_gpt_trainable(const model *m)
{
    return bc_gpt_all_f32(m) && !m->variant;
}

/* The MLP has a gate (SwiGLU or GeGLU). */
static inline int bc_gpt_gated(int activation)
{
    return activation == BC_ACT_SWIGLU || activation == BC_ACT_GEGLU;
}

/* ---- parameter layout --------------------------------------------------- */

/* What a tensor is: a float32 vector, a packed matrix, a float32 row table. */
enum { T_VEC, T_MAT, T_ROWS };

/* The layer's parts a block tensor fills. */
enum { F_LN1_W, F_LN1_B, F_QKV_W, F_QKV_B, F_PROJ_W, F_PROJ_B, F_LN2_W, F_LN2_B,
       F_UP_W, F_UP_B, F_GATE_W, F_GATE_B, F_DOWN_W, F_DOWN_B, F_QN_W, F_KN_W, F_LN1P_W,
       F_LN2P_W, F_ROUTER_W, F_EUP_W, F_EGATE_W, F_EDOWN_W, F_N };

typedef struct {
    const char *name;
    size_t rows, cols;  /* cols 0: a vector of rows */
    int kind, field;
    size_t count;       /* 0 or 1: one tensor; E: one per expert (experts.e.NAME) */
} tdesc;

#define MAX_BLK F_N

/* Every offset and size in bytes, computed once per call from the config. A
 * mixed model's blocks differ in size: layer l starts at layer_off[l] and its
 * tensors' offsets and sizes are bc_gpt_block_tensor's. */
typedef struct {
    size_t nblk;                          /* tensor kinds per block (blk) */
    size_t nper;                          /* tensors per block, each expert's counted */
    tdesc blk[MAX_BLK];
    size_t blk_off[MAX_BLK], blk_bytes[MAX_BLK];  /* uniform models: every layer's */
    size_t block_bytes;                           /* uniform models: every layer's */
    size_t layer_off[BC_GPT_FMT_LAYERS + 1];      /* mixed models: layer l's offset */
    size_t token, token_bytes, position, position_bytes, blocks;
    size_t norm_w, norm_b, head, head_bytes, total;
    int has_pos, has_norm, has_norm_b;
    size_t params, ntensors;              /* parameter and tensor counts */
} layout;

/* n: elements of one sequence's part of each of a cache's k and v at this
 * capacity (<= the context): sum over layers of KV R_l Dh. BC_EOVERFLOW. */
int bc_gpt_cache_seq_elems(size_t *n, const model *m, size_t capacity);

/* n: bc_gpt_cache_size's elements for the resolved model m (its own copy of the
 * sliding flags: m->c.sliding is NULL once resolved). */
int bc_gpt_cache_elems(size_t *n, const model *m, size_t batch, size_t capacity);

/* The config resolved and its layout computed (every size checked). */
int bc_gpt_checked(model *m, layout *lo, const bc_gpt_config *cfg);

/* Offset and bytes of tensor j of layer l's block (the layout's blk[j]; with
 * experts, all E copies: expert e's at offset + e * bytes / E). */
void bc_gpt_block_tensor(size_t *offset, size_t *bytes, const model *m, const layout *lo,
                         size_t l, size_t j);

/* The layer this model's blocks are. */
bc_layer_cfg bc_gpt_layer_cfg(const model *m);

/* Layer l's weights: pointers into the parameter buffer (or a buffer laid out
 * as it, e.g. the gradients: then only the pointers' places matter). */
bc_layer_w bc_gpt_layer_w(const unsigned char *params, const model *m, const layout *lo, size_t l);

/* x (N,D) = token[ids] (+ position[pos0[b] + t]) for the N = B*T rows b*T+t
 * of ids; pos0 (B) each sequence's first position, NULL: 0. Each id is read
 * once, checked and used as read (BC_ERANGE for one outside the vocabulary:
 * rows before it written). */
int bc_gpt_embed(float *x, const unsigned char *params, const model *m, const layout *lo,
                 const void *ids, int ids_type, const size_t *pos0, size_t batch, size_t seq,
                 const bc_ctx *cx);

/* The id at row i, or BC_ERANGE outside [0, vocab) (read once). */
int bc_gpt_id_at(size_t *id, const void *ids, int ids_type, size_t i, size_t vocab);

/* A KV cache's dtype for a model of head size dh: BC_DTYPE_F32, BC_DTYPE_F16, or
 * BC_DTYPE_Q8_0 / BC_DTYPE_Q4_0 (bc_format.h's blocks of 32) when dh is a multiple
 * of 32; BC_EOPTION for anything else. */
static inline int bc_gpt_cache_dtype(int dtype, size_t dh)
{
    if (dtype == BC_DTYPE_F32 || dtype == BC_DTYPE_F16)
        return BC_OK;
    if ((dtype == BC_DTYPE_Q8_0 || dtype == BC_DTYPE_Q4_0) && dh % BC_KVQ_BLOCK == 0)
        return BC_OK;
    return BC_EOPTION;
}

/* Bytes of n elements (a multiple of Dh: whole rows) of a cache of a checked dtype. */
static inline size_t bc_gpt_cache_span(int dtype, size_t n)
{
    return dtype == BC_DTYPE_F32   ? n * sizeof(float)
           : dtype == BC_DTYPE_F16 ? n * sizeof(uint16_t)
                                   : bc_kvq_bytes(dtype, n);
}

/* Floats spanning n cache elements of a checked dtype: what the overlap checks count. */
static inline size_t bc_gpt_cache_floats(int dtype, size_t n)
{
    const size_t b = bc_gpt_cache_span(dtype, n);
    return b / sizeof(float) + (b % sizeof(float) != 0);
}

#endif

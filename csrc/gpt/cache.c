/* cache.c: operations on a KV cache's sequences (bc_gpt.h): truncating one,
 * copying a prefix from one sequence to another. The layout is bc_gpt.h's:
 * sequence b, layer l, K/V head g at b S + (sum over l' < l of KV R_l' Dh) + g R_l Dh
 * elements (floats, halves for a BC_DTYPE_F16 cache, or rows of blocks of 32 for a
 * quantised one: bc_gpt_cache_span's bytes), R_l the layer's rows
 * (bc_gpt_ring_rows: the capacity in whole tiles of BC_ATT_BK positions, or a
 * sliding layer's ring), S the sequence's sum; keys transposed tile by tile
 * (position p at row r = p mod R_l, dimension d at (r / BK) BK Dh + d BK + r % BK),
 * values as rows (a quantised cache's key tiles: bc_format.h). */
#include <string.h>
#include "gpt_internal.h"
#include "bc_check.h"

/* The cache's fields read once into *cc and checked; *block: elements of one
 * sequence's part (every layer and K/V head); *total: elements of each of k and v. */
static int cache_checked(bc_gpt_cache *cc, model *m, size_t *block, size_t *total,
                         const bc_gpt_cache *cache, const bc_gpt_config *cfg)
{
    layout lo;
    int st;
    if (!cache || !cfg)
        return BC_ENULL;
    *cc = *cache;  /* read once */
    if ((st = bc_gpt_checked(m, &lo, cfg)))
        return st;
    if (!cc->k || !cc->v)
        return BC_ENULL;
    if ((st = bc_gpt_cache_dtype(cc->dtype, m->dh)))
        return st;
    if (!cc->batch || !cc->capacity)
        return BC_ESIZE;
    if ((st = bc_gpt_cache_elems(total, m, cc->batch, cc->capacity)))
        return st;  /* BC_ECONTEXT: capacity past the context */
    *block = *total / cc->batch;  /* one sequence's elements */
    const size_t lengths_n = cc->lengths ? 2 * cc->batch : 0;  /* size_t in floats, at most */
    const size_t kv_n = bc_gpt_cache_floats(cc->dtype, *total);
    const float *k = cc->k, *v = cc->v;
    if (bc_overlap(k, kv_n, v, kv_n)
        || (lengths_n && (bc_overlap(k, kv_n, (const float *)cc->lengths, lengths_n)
                          || bc_overlap(v, kv_n, (const float *)cc->lengths, lengths_n))))
        return BC_EALIAS;
    return BC_OK;
}

/* Whether a sequence of length len, cut to n, still holds every position n's
 * query reads: a ring layer (R_l rows < len) keeps positions len - R_l.., and
 * position n sees n - W + 1.. (BC_EEVICTED when the ring overwrote one; n = 0
 * reads nothing). */
static int ring_holds(const model *m, size_t capacity, size_t len, size_t n)
{
    for (size_t l = 0; l < m->c.layers; l++) {
        const size_t r = bc_gpt_layer_rows(m, l, capacity), w = bc_gpt_window(m, l);
        if (w && n && len > r && n + r < len + w - 1)
            return BC_EEVICTED;
    }
    return BC_OK;
}

/* sequence b's length, read once; BC_ESIZE past the capacity */
static int length_of(size_t *len, const bc_gpt_cache *cc, size_t b)
{
    const size_t n = cc->lengths ? cc->lengths[b] : cc->length;
    if (n > cc->capacity)
        return BC_ESIZE;
    *len = n;
    return BC_OK;
}

int bc_gpt_cache_truncate(bc_gpt_cache *cache, const bc_gpt_config *cfg, size_t seq, size_t n)
{
    bc_gpt_cache cc;
    model m;
    size_t block, total, len;
    int st;
    if ((st = cache_checked(&cc, &m, &block, &total, cache, cfg)))
        return st;
    if (seq >= cc.batch)
        return BC_ERANGE;
    if ((st = length_of(&len, &cc, seq)))
        return st;
    if (n > len)
        return BC_ERANGE;
    if ((st = ring_holds(&m, cc.capacity, len, n)))
        return st;
    if (cc.lengths)
        cc.lengths[seq] = n;
    else
        cache->length = n;
    return BC_OK;
}

// dst, src: one (layer, head) block each, R Dh elements of a quantised cache (keys in
// tiles of BK: rows of BK lanes, bc_format.h); the first n positions copied
static void copy_block_q(unsigned char *dk, unsigned char *dv, const unsigned char *sk,
                         const unsigned char *sv, size_t n, size_t dh, int dtype)
{
    const size_t bk = BC_ATT_BK, whole = n / bk, rest = n % bk, nb = dh / BC_KVQ_BLOCK;
    const size_t tile = bc_kvq_bytes(dtype, bk * dh);
    memcpy(dk, sk, whole * tile);  /* whole tiles as they lie */
    if (rest) {  /* the last tile: its first `rest` lanes of each scales' and values' row */
        const size_t t = whole * tile, qrows = dtype == BC_DTYPE_Q8_0 ? dh : dh / 2;
        for (size_t r = 0; r < nb; r++)
            memcpy(dk + t + r * bk * 2, sk + t + r * bk * 2, rest * 2);
        for (size_t r = 0; r < qrows; r++)
            memcpy(dk + t + nb * bk * 2 + r * bk, sk + t + nb * bk * 2 + r * bk, rest);
    }
    memcpy(dv, sv, bc_kvq_bytes(dtype, n * dh));
}

// dst, src: one (layer, head) block each, R Dh elements of a cache's dtype; the first
// n positions copied
static void copy_block(unsigned char *dk, unsigned char *dv, const unsigned char *sk,
                       const unsigned char *sv, size_t n, size_t dh, int dtype)
{
    if (dtype != BC_DTYPE_F32 && dtype != BC_DTYPE_F16) {
        copy_block_q(dk, dv, sk, sv, n, dh, dtype);
        return;
    }
    const size_t es = bc_gpt_cache_span(dtype, 1);
    const size_t bk = BC_ATT_BK, whole = n / bk, rest = n % bk;
    memcpy(dk, sk, whole * bk * dh * es);  /* whole tiles as they lie */
    if (rest) {
        const size_t t = whole * bk * dh;
        for (size_t d = 0; d < dh; d++)  /* the last tile: its first `rest` lanes per dimension */
            memcpy(dk + (t + d * bk) * es, sk + (t + d * bk) * es, rest * es);
    }
    memcpy(dv, sv, n * dh * es);
}

int bc_gpt_cache_copy(bc_gpt_cache *cache, const bc_gpt_config *cfg, size_t dst, size_t src,
                      size_t n)
{
    bc_gpt_cache cc;
    model m;
    size_t block, total, len;
    int st;
    if ((st = cache_checked(&cc, &m, &block, &total, cache, cfg)))
        return st;
    if (dst >= cc.batch || src >= cc.batch)
        return BC_ERANGE;
    if (!cc.lengths && cc.batch > 1)
        return BC_EOPTION;  /* one shared length cannot tell dst's apart */
    if ((st = length_of(&len, &cc, src)))
        return st;
    if (n > len)
        return BC_ERANGE;
    if ((st = ring_holds(&m, cc.capacity, len, n)))
        return st;
    if (dst != src) {
        /* block: one sequence's elements; each layer's K/V heads of R_l rows in turn */
        unsigned char *k = cc.k, *v = cc.v;
        size_t at = 0;
        for (size_t l = 0; l < m.c.layers; l++) {
            const size_t r = bc_gpt_layer_rows(&m, l, cc.capacity);
            /* a ring whose slots wrapped: every slot, as it lies (slot = position mod r) */
            const size_t npos = len > r || n > r ? r : n;
            for (size_t g = 0; g < m.kv; g++, at += r * m.dh) {
                const size_t so = bc_gpt_cache_span(cc.dtype, src * block + at);
                const size_t d = bc_gpt_cache_span(cc.dtype, dst * block + at);
                copy_block(k + d, v + d, k + so, v + so, npos, m.dh, cc.dtype);
            }
        }
    }
    if (cc.lengths)
        cc.lengths[dst] = n;
    else
        cache->length = n;
    return BC_OK;
}

/* fast_attention.h: attention's kernels, forward and backward (part of the
 * kernel template, fast_tmpl.h: included once per instruction set).
 *   attn_unit    one head, one tile of queries, online softmax over key tiles
 *   attn_decode  one query row against one K/V head's query heads (decoding),
 *                attn_unit's chains exactly
 *   attn_bwd_kv, attn_bwd_q  the flash backward from each query's lse
 * Driven over threads by attention.c and grad.c. */

/* ======================================================================== */
/* Attention: one head, one tile of BQ queries, online softmax over key     */
/* tiles; scores live transposed (key, query lane) so the softmax is        */
/* lane-wise. Never more than BC_ATT_BK x BQ scores at once.                */
/* ======================================================================== */

#define BQ NR  /* queries per unit; a unit of at most VL queries runs on one vector */

/* attn_unit's: Qt (Dh, BQ), Ot (Dh, BQ), St (BK, BQ), m (BQ), l (BQ), then a
 * half cache's tile widened, keys (Dh, BK) and values (BK, Dh); or
 * attn_decode's: (Dh, BK) transposed keys, (2 Dh + BK) per head, then a half
 * cache's values (BK, Dh) or a quantised tile's value scales (kv_vscales: at
 * most BK Dh / 8 + BK Dh / 64 + VL) */
static size_t attn_scratch(size_t d_head)
{
    const size_t unit = (2 * d_head + BC_ATT_BK + 2) * BQ + 2 * d_head * BC_ATT_BK;
    const size_t decode = 2 * d_head * BC_ATT_BK + (2 * d_head + BC_ATT_BK) * BQ;
    return unit > decode ? unit : decode;
}

// dst (n) = src (n) halves as floats
static void widen(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(dst + i, vload_half(src + i));
    for (; i < n; i++)
        dst[i] = bc_half_to_f32(src[i]);
}

/* One tile of a half cache as floats: kf = the tile's keys, transposed as they
 * lie (lanes of keys past nk 0), and vf = its nk values' rows: exactly the
 * halves' values, so the chains that read them are a float cache's. */
// kf (Dh, BK), vf (nk, Dh); k16 (Dh, BK) halves, v16 (nk, ldv) halves
static void kv_widen(float *kf, float *vf, const uint16_t *k16, const uint16_t *v16, size_t ldv,
                     size_t nk, size_t dh)
{
    for (size_t d = 0; d < dh; d++) {
        widen(kf + d * BC_ATT_BK, k16 + d * BC_ATT_BK, nk);
        memset(kf + d * BC_ATT_BK + nk, 0, (BC_ATT_BK - nk) * sizeof(float));
    }
    for (size_t j = 0; j < nk; j++)
        widen(vf + j * dh, v16 + j * ldv, dh);
}

/* The vector instruction sets read a q4_0 nibble n as f = 1 + n 2^-e (vload_nibm:
 * e = 15 for a block's low nibbles, 11 for its high ones) and the value as
 * fma(f, 2^e d, -(2^e + 8) d): exact (fast_formats.h's q4_0 panels), so the same
 * bits as half(d) * (n - 8); portable C reads n - 8 and multiplies by d. Floats a
 * scale d of a q4_0 block keeps (KVQ_S of them): 2^15 d, -(2^15 + 8) d, 2^11 d,
 * -(2^11 + 8) d; or d. */
#if BC_SIMD
#define KVQ_S 4
#else
#define KVQ_S 1
#endif

// s (KVQ_S) <- the floats a q4_0 value block's scale d keeps
BC_INLINE void q4_scales(float *s, float d)
{
#if BC_SIMD
    s[0] = d * 32768.0f;
    s[1] = d * -32776.0f;
    s[2] = d * 2048.0f;
    s[3] = d * -2056.0f;
#else
    s[0] = d;
#endif
}

// VL values from p (q4_0 bytes: the low or, hi, high nibbles) given q4_scales' s[hi*2..]
// as vectors s, m (portable C: s only)
BC_INLINE V q4_vec(const unsigned char *p, int hi, V s, V m)
{
#if BC_SIMD
    return vfma(vload_nibm(p, hi), s, m);
#else
    (void)m;
    return vmul(vload_nib8(p, hi), s);
#endif
}

/* One row of a quantised cache as floats (bc_format.h's blocks): each value
 * half(d) * q, an exact product, so every instruction set reads the same bits. */
// dst (Dh) <- src: Dh / 32 blocks of dtype (BC_DTYPE_Q8_0 or BC_DTYPE_Q4_0)
static void kvq_row(float *dst, const unsigned char *src, int dtype, size_t dh)
{
    const size_t bb = bc_kvq_block_bytes(dtype);
    for (size_t b = 0; b < dh; b += BC_KVQ_BLOCK, src += bb, dst += BC_KVQ_BLOCK) {
        uint16_t h;
        memcpy(&h, src, sizeof h);
        const float d = bc_half_to_f32(h);
        if (dtype == BC_DTYPE_Q4_0) {  /* q4_vec: values k and k + 16 in byte k's nibbles */
            float s[KVQ_S];
            q4_scales(s, d);
            for (size_t k = 0; k < BC_KVQ_BLOCK; k += VL) {
                const int hi = k >= 16;
#if BC_SIMD
                vstore(dst + k, q4_vec(src + 2 + k % 16, hi, vset1(s[2 * hi]), vset1(s[2 * hi + 1])));
#else
                vstore(dst + k, q4_vec(src + 2 + k % 16, hi, vset1(s[0]), vzero()));
#endif
            }
            continue;
        }
        const int8_t *q = (const int8_t *)(src + 2);
        const V dv = vset1(d);  /* one product per value: the scalar's bits */
        for (size_t k = 0; k < BC_KVQ_BLOCK; k += VL)
            vstore(dst + k, vmul(vload_i8(q + k), dv));
    }
}

/* A tile of a quantised cache's keys as floats (bc_format.h's tiled layout: the
 * scales' rows, then the values' rows of BK bytes), transposed as they lie: lane j
 * of row d = half(d_bj) * q_dj, exact, so every instruction set reads the same bits;
 * lanes past nk 0. */
// kf (Dh, BK) <- tile
static void kq_tile(float *kf, const unsigned char *tile, int dtype, size_t nk, size_t dh)
{
    const size_t bk = BC_ATT_BK, nb = dh / BC_KVQ_BLOCK, nl = (nk + VL - 1) / VL * VL;
    const uint16_t *sc = (const uint16_t *)(const void *)tile;  /* 2-byte aligned */
    const unsigned char *q = tile + nb * bk * sizeof(uint16_t);
    for (size_t b = 0; b < nb; b++)
        for (size_t k = 0; k < BC_KVQ_BLOCK; k++) {
            const size_t d = b * BC_KVQ_BLOCK + k;
            const int hi = k >= 16;
            float *kd = kf + d * bk;
            for (size_t j = 0; j < nl; j += VL) {
                const V sv = vload_half(sc + b * bk + j);
                if (dtype == BC_DTYPE_Q4_0) {  /* q4_vec: row b 16 + k % 16, nibble hi */
                    const unsigned char *by = q + (b * 16 + k % 16) * bk + j;
#if BC_SIMD
                    vstore(kd + j, q4_vec(by, hi, vmul(sv, vset1(hi ? 2048.0f : 32768.0f)),
                                          vmul(sv, vset1(hi ? -2056.0f : -32776.0f))));
#else
                    vstore(kd + j, q4_vec(by, hi, sv, vzero()));
#endif
                } else {
                    vstore(kd + j, vmul(vload_i8((const int8_t *)(q + d * bk + j)), sv));
                }
            }
            if (nk < bk)
                memset(kd + nk, 0, (bk - nk) * sizeof(float));
        }
}

/* One tile of a quantised cache as floats: kf = its keys (kq_tile), vf = its nk
 * values' rows: exactly the blocks' values, so the chains that read them are a float
 * cache's (the whole cache is never widened: a tile at a time). attn_unit's; decoding
 * reads the blocks in place (kq_scores, tile_v), each value the same exact product. */
// kf (Dh, BK), vf (nk, Dh); kt: the tile of keys; vq: its first value row, a row every rb bytes
static void kv_dequant(float *kf, float *vf, const unsigned char *kt, const unsigned char *vq,
                       size_t rb, int dtype, size_t nk, size_t dh)
{
    kq_tile(kf, kt, dtype, nk, dh);
    for (size_t j = 0; j < nk; j++)
        kvq_row(vf + j * dh, vq + j * rb, dtype, dh);
}

/* dst[i] (rb rows of nv*VL lanes) = (accumulate ? alpha * dst[i] : 0)
 *                                   + sum_t a[i*sa + t*st] * bv[t] (bv rows of nv*VL lanes).
 * masked: for term t, lanes [0, lim[t]) and [hi[t], nv*VL) are left as they are
 * (causal keys those queries must not see, and keys before a sliding window:
 * not even a NaN or inf in them may leak).
 * Each lane's chain is the same for nv = 1 and nv = 2. */
BC_INLINE void mk(const int rb, const int masked, const int nv, size_t nt,
                      const float *restrict a, size_t sa, size_t st, const float *restrict bv,
                      float *restrict dst, const float *restrict alpha, int accumulate,
                      const size_t *lim, const size_t *hi)
{
    const size_t bq = (size_t)nv * VL;
    V c0[MR], c1[MR];
    if (accumulate) {
        const V al0 = vload(alpha), al1 = nv == 2 ? vload(alpha + VL) : vzero();
        BC_UNROLL
        for (int i = 0; i < rb; i++) {
            c0[i] = vmul(vload(dst + i * bq), al0);
            c1[i] = nv == 2 ? vmul(vload(dst + i * bq + VL), al1) : vzero();
        }
    } else {
        BC_UNROLL
        for (int i = 0; i < rb; i++) {
            c0[i] = vzero();
            c1[i] = vzero();
        }
    }
    for (size_t t = 0; t < nt; t++) {
        const V b0 = vload(bv + t * bq), b1 = nv == 2 ? vload(bv + t * bq + VL) : vzero();
        const float *at = a + t * st;
        if (masked) {
            const size_t l0 = min_sz(lim[t], VL), l1 = lim[t] > VL ? min_sz(lim[t] - VL, VL) : 0;
            const size_t h0 = min_sz(hi[t], VL), h1 = hi[t] > VL ? min_sz(hi[t] - VL, VL) : 0;
            BC_UNROLL
            for (int i = 0; i < rb; i++) {
                const V av = vset1(at[i * sa]);
                c0[i] = vkeep_lo(c0[i], vkeep_lo(vfma(av, b0, c0[i]), c0[i], l0), h0);
                if (nv == 2)
                    c1[i] = vkeep_lo(c1[i], vkeep_lo(vfma(av, b1, c1[i]), c1[i], l1), h1);
            }
        } else {
            BC_UNROLL
            for (int i = 0; i < rb; i++) {
                const V av = vset1(at[i * sa]);
                c0[i] = vfma(av, b0, c0[i]);
                if (nv == 2)
                    c1[i] = vfma(av, b1, c1[i]);
            }
        }
    }
    BC_UNROLL
    for (int i = 0; i < rb; i++) {
        vstore(dst + i * bq, c0[i]);
        if (nv == 2)
            vstore(dst + i * bq + VL, c1[i]);
    }
}

/* mk() with its row count rb a compile-time constant (1..MR); always inlined
 * into mk_any, so masked and nv are constants in each of its four copies */
BC_INLINE void mk_rb(const int masked, const int nv, int rb, size_t nt, const float *a,
                     size_t sa, size_t st, const float *bv, float *dst, const float *alpha,
                     int accumulate, const size_t *lim, const size_t *hi)
{
    switch (rb) {
    case 1: mk(1, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 2: mk(2, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 3: mk(3, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 4: mk(4, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
#if MR >= 6
    case 5: mk(5, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 6: mk(6, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
#endif
#if MR >= 14
    case 7: mk(7, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 8: mk(8, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 9: mk(9, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 10: mk(10, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 11: mk(11, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 12: mk(12, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 13: mk(13, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
    case 14: mk(14, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi); break;
#endif
    default: break;
    }
}

/* mk() for rb rows, masked when lim (and hi) are given, on nv (1 or 2) vectors of lanes */
static void mk_any(int rb, int nv, size_t nt, const float *a, size_t sa, size_t st,
                   const float *bv, float *dst, const float *alpha, int accumulate,
                   const size_t *lim, const size_t *hi)
{
    if (nv == 1) {
        if (lim)
            mk_rb(1, 1, rb, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi);
        else
            mk_rb(0, 1, rb, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi);
    } else {
        if (lim)
            mk_rb(1, 2, rb, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi);
        else
            mk_rb(0, 2, rb, nt, a, sa, st, bv, dst, alpha, accumulate, lim, hi);
    }
}

/* dst rows (n, nv*VL), in blocks of MR rows */
static void mk_rows(size_t n, int nv, size_t nt, const float *a, size_t sa, size_t st,
                        const float *bv, float *dst, const float *alpha, int accumulate,
                        const size_t *lim, const size_t *hi)
{
    for (size_t i = 0; i < n; i += MR) {
        const int rb = (int)min_sz(MR, n - i);
        mk_any(rb, nv, nt, a + i * sa, sa, st, bv, dst + i * (size_t)nv * VL, alpha,
                   accumulate, lim, hi);
    }
}

/* Soft-capping (Gemma 2): s[i] = cap * tanh(s[i] / cap) for n scores, one
 * element at a time in float32, so a score's bits do not depend on the kernel
 * (prefill or decoding) that computed it. */
// s (n) scores, in place
static void softcap_scores(float *s, size_t n, float cap)
{
    for (size_t i = 0; i < n; i++)
        s[i] = cap * tanhf(s[i] / cap);
}

/* One unit on nv vectors of lanes (nq <= nv*VL queries). */
BC_INLINE void attn_unit_nv(const int nv, const bc_attn *A, size_t h, size_t i0, size_t nq,
                             float *scratch)
{
    const size_t bq = (size_t)nv * VL;
    const size_t dh = A->d_head, off = h * dh, kvh = h / A->kv_group;
    /* a half or quantised cache: each tile widened into kf, vf */
    const int half = A->k16 != NULL || A->kq != NULL;
    const float *kh = half ? NULL : A->k + kvh * A->khs, *vh = half ? NULL : A->v + kvh * A->vhs;
    float *kf = scratch + (2 * dh + BC_ATT_BK + 2) * BQ, *vf = kf + dh * BC_ATT_BK;
    float *qt = scratch;                 /* (Dh, bq) scaled queries, transposed */
    float *ot = qt + dh * bq;            /* (Dh, bq) unnormalised output, transposed */
    float *st = ot + dh * bq;            /* (BK, bq) scores, then probabilities */
    float *mx = st + BC_ATT_BK * bq;     /* (bq) running max */
    float *sum = mx + bq;                /* (bq) running sum */
    const float scale = 1.0f / sqrtf((float)dh);

    /* keys visible to the last query of the tile */
    size_t kend = A->tk;
    if (A->causal) {
        const size_t last = A->q_pos0 + i0 + nq;  /* keys < last */
        kend = min_sz(kend, last);
    }
    /* a sliding window: from the tile holding the first query's first key (earlier
     * tiles are masked for every lane; a lane's leading masked tiles change no bit) */
    const size_t base = A->q_pos0 + i0;
    const size_t kbeg = A->window && base >= A->window
                            ? (base + 1 - A->window) / BC_ATT_BK * BC_ATT_BK : 0;
    if (kend == 0) {
        for (size_t i = 0; i < nq; i++) {
            memset(A->out + (i0 + i) * A->ldo + off, 0, dh * sizeof(float));
            if (A->lse)
                A->lse[h * A->tq + i0 + i] = -INFINITY;
        }
        return;
    }
    for (size_t d = 0; d < dh; d++) {
        float *row = qt + d * bq;
        for (size_t i = 0; i < bq; i++)
            row[i] = i < nq ? A->q[(i0 + i) * A->ldq + off + d] * scale : 0.0f;
    }
    for (size_t i = 0; i < bq; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0f;
    }
    float alpha[BQ];
    size_t lim[BC_ATT_BK], hi[BC_ATT_BK];
    for (size_t j0 = kbeg; j0 < kend; j0 += BC_ATT_BK) {
        const size_t nk = min_sz(BC_ATT_BK, kend - j0);
        const size_t jr = A->ring ? j0 % A->ring : j0;  /* the tile's rows (a ring's slots) */
        /* the tile's values (nk rows of ldv), and its keys where they lie; a half
         * cache's tile widened into kf, vf first */
        const float *kt = half ? kf : kh + jr * dh, *vt = half ? vf : vh + jr * A->ldv;
        const size_t ldv = half ? dh : A->ldv;
        if (A->kq)
            kv_dequant(kf, vf, A->kq + bc_kvq_bytes(A->kq_dtype, kvh * A->khs + jr * dh),
                       A->vq + bc_kvq_bytes(A->kq_dtype, kvh * A->vhs + jr * dh),
                       bc_kvq_bytes(A->kq_dtype, dh), A->kq_dtype, nk, dh);
        else if (half)
            kv_widen(kf, vf, A->k16 + kvh * A->khs + jr * dh, A->v16 + kvh * A->vhs + jr * A->ldv,
                     A->ldv, nk, dh);
        /* St (nk, bq) = K[j0:j0+nk] . Qt */
        if (half || A->k_tiled)  /* the tile's keys transposed: key +1, dimension +BK */
            mk_rows(nk, nv, dh, kt, 1, BC_ATT_BK, qt, st, NULL, 0, NULL, NULL);
        else
            mk_rows(nk, nv, dh, kh + jr * A->ldk, A->ldk, 1, qt, st, NULL, 0, NULL, NULL);
        if (A->softcap != 0.0f)  /* before the mask: masked lanes become -inf below */
            softcap_scores(st, nk * bq, A->softcap);
        /* causal: lanes i with q_pos0 + i0 + i < j do not see key j; a window: nor
         * lanes with q_pos0 + i0 + i >= j + W (lanes from hi[j] on) */
        int any_masked = 0;
        for (size_t j = 0; j < nk; j++) {
            const size_t key = j0 + j;
            lim[j] = A->causal && key > base ? key - base : 0;
            hi[j] = !A->window ? bq : key + A->window > base ? min_sz(bq, key + A->window - base) : 0;
            if (lim[j] || hi[j] < bq) {
                any_masked = 1;
                float *row = st + j * bq;
                const size_t h0 = min_sz(hi[j], VL), h1 = hi[j] > VL ? min_sz(hi[j] - VL, VL) : 0;
                const V ninf = vset1(-INFINITY);
                vstore(row, vkeep_lo(ninf, vfill_lo(vload(row), min_sz(lim[j], VL), -INFINITY), h0));
                if (nv == 2)
                    vstore(row + VL, vkeep_lo(ninf, vfill_lo(vload(row + VL), lim[j] > VL ? min_sz(lim[j] - VL, VL) : 0,
                                                            -INFINITY), h1));
            }
        }
        /* online softmax, lane-wise: new max t, rescale s = exp(m - t); a lane that
         * has seen no key yet (t = -inf: a window's leading tile) subtracts -FLT_MAX
         * instead, so its s and p are 0, not exp(NaN); every other lane's t is as is */
        const V m0 = vload(mx), m1 = nv == 2 ? vload(mx + VL) : vzero();
        V t0 = m0, t1 = m1;
        for (size_t j = 0; j < nk; j++) {
            t0 = vmax(t0, vload(st + j * bq));
            if (nv == 2)
                t1 = vmax(t1, vload(st + j * bq + VL));
        }
        const V lowest = vset1(-FLT_MAX);
        const V z0 = vmax(lowest, t0), z1 = vmax(lowest, t1);  /* NaN stays NaN */
        const V s0 = vexp(vsub(m0, z0)), s1 = nv == 2 ? vexp(vsub(m1, z1)) : vzero();
        V l0 = vmul(vload(sum), s0), l1 = nv == 2 ? vmul(vload(sum + VL), s1) : vzero();
        for (size_t j = 0; j < nk; j++) {
            float *row = st + j * bq;
            const size_t h0 = min_sz(hi[j], VL), h1 = hi[j] > VL ? min_sz(hi[j] - VL, VL) : 0;
            V p0 = vexp(vsub(vload(row), z0));
            if (lim[j])  /* exactly 0, not exp(-inf) rounded */
                p0 = vfill_lo(p0, min_sz(lim[j], VL), 0.0f);
            if (h0 < VL)
                p0 = vkeep_lo(vzero(), p0, h0);
            vstore(row, p0);
            l0 = vadd(l0, p0);
            if (nv == 2) {
                V p1 = vexp(vsub(vload(row + VL), z1));
                if (lim[j] > VL)
                    p1 = vfill_lo(p1, min_sz(lim[j] - VL, VL), 0.0f);
                if (h1 < VL)
                    p1 = vkeep_lo(vzero(), p1, h1);
                vstore(row + VL, p1);
                l1 = vadd(l1, p1);
            }
        }
        vstore(mx, t0);
        vstore(sum, l0);
        vstore(alpha, s0);
        if (nv == 2) {
            vstore(mx + VL, t1);
            vstore(sum + VL, l1);
            vstore(alpha + VL, s1);
        }
        /* Ot (Dh, bq) = alpha * Ot + V[j0:j0+nk]^T . P */
        mk_rows(dh, nv, nk, vt, 1, ldv, st, ot, alpha, j0 > kbeg, any_masked ? lim : NULL, hi);
    }
    for (size_t i = 0; i < nq; i++) {
        float *oi = A->out + (i0 + i) * A->ldo + off;
        const float inv = 1.0f / sum[i];
        for (size_t d = 0; d < dh; d++)
            oi[d] = ot[d * bq + i] * inv;
        if (A->lse)  /* for the backward: p = exp(s - lse) */
            A->lse[h * A->tq + i0 + i] = mx[i] + logf(sum[i]);
    }
}

/* The unit of queries i0..i0+BQ (fewer at the end): on one vector of lanes when
 * they fit (decoding: one query), else on two; the same bits either way. */
// out (Tq, H*Dh) rows i0.. of head h, q (Tq, .), k, v (Tk, KV*Dh) as bc_kv; lse (H, Tq) or NULL
static void attn_unit(const bc_attn *A, size_t h, size_t i0, float *scratch)
{
    const size_t nq = min_sz(BQ, A->tq - i0);
    if (nq <= VL)
        attn_unit_nv(1, A, h, i0, nq, scratch);
    else
        attn_unit_nv(2, A, h, i0, nq, scratch);
}

/* ------------------------------------------------------------------------ */
/* Decoding: one query row, the query heads of one K/V head, the keys in     */
/* lanes. Every query gets exactly attn_unit's chain (the same bits: a KV    */
/* cache's step equals the full pass): per tile of BC_ATT_BK keys, scores    */
/* s = fma over d of k[j][d] * (q[d] * scale) from 0, the running max m and  */
/* sum l updated in key order, p = exp(s - t), then the output rescaled and  */
/* fma'd with v[j] * p in key order; out = O * (1 / l). Keys past the query  */
/* are never visited (in attn_unit they are masked: they add nothing).       */
/* ------------------------------------------------------------------------ */

#define KLANES (BC_ATT_BK / VL)  /* vectors of keys in a tile */
#define DCHUNK 8                  /* head-dim vectors a PV pass keeps in flight */

/* kt (Dh, BK) = rows x[0..nk) (stride ld; nk <= BK) transposed, lanes past
 * nk zero: VL x VL blocks through registers. Decoding's keys, the backward's
 * keys and values. */
// kt (Dh, BK); x (nk, ld)
static void kv_transpose(float *kt, const float *x, size_t ld, size_t nk, size_t dh)
{
    for (size_t jb = 0; jb < BC_ATT_BK; jb += VL) {
        const size_t rows = jb < nk ? min_sz(VL, nk - jb) : 0;
        for (size_t d0 = 0; d0 < dh; d0 += VL) {
            const size_t nd = min_sz(VL, dh - d0);
            V r[VL], t[VL];
            const float *xr = x + jb * ld + d0;
            if (rows == VL && nd == VL) {
                BC_UNROLL
                for (size_t j = 0; j < VL; j++)
                    r[j] = vload(xr + j * ld);
            } else {
                BC_UNROLL
                for (size_t j = 0; j < VL; j++)
                    r[j] = j < rows ? vloadn(xr + j * ld, nd) : vzero();
            }
            vtranspose(t, r);
            for (size_t dd = 0; dd < nd; dd++)
                vstore(kt + (d0 + dd) * BC_ATT_BK + jb, t[dd]);
        }
    }
}

/* query heads a decoding tile runs side by side: as many as keep their score
 * chains (KLANES each) in 16 registers (4 on AVX-512, 1 on AVX2); HMAX bounds
 * every instruction set's */
#define HMAX 4
#define HP (KLANES <= 4 ? HMAX : 1)

/* How a decoding tile's keys and values lie (heads_tile's kind, a constant in
 * each copy): floats, IEEE halves, or a quantised cache's blocks (bc_format.h). */
#define KV_F32 0
#define KV_F16 1
#define KV_Q8 2
#define KV_Q4 3

/* A decoding tile's keys and values where they lie: floats (k, v), from a half
 * cache IEEE halves (k16, v16), or from a quantised cache its tile of keys (kq)
 * and its first value row (vq, a row every vrb bytes), each value read as the
 * exact product half(d) * q straight into the float chains; keys (Dh, BK)
 * transposed, values nk rows of ldv. vs: the value rows' scales as floats
 * (kv_vscales). */
typedef struct {
    const float *k, *v;
    const uint16_t *k16, *v16;
    size_t ldv;
    float softcap;  /* bc_attn's: 0, or the scores soft-capped */
    const unsigned char *kq, *vq;
    const float *vs;
    size_t vrb;
} kv_tile;

/* A quantised tile's value scales as floats, in KVQ_S planes of BK nb floats (nb
 * = Dh / 32 blocks a row): plane 0 at vs[j nb + b] the scale d of row j's block b
 * (q8_0), or q4_scales' floats plane by plane (q4_0). The halves are gathered
 * first, then widened VL at a time (exact conversions). */
// vs (KVQ_S, BK nb) then BK nb + VL halves; vq: the first row, a row every rb bytes
static void kv_vscales(float *vs, const unsigned char *vq, size_t rb, int kind, size_t nk,
                       size_t nb)
{
    const size_t bb = kind == KV_Q8 ? 34 : 18, plane = BC_ATT_BK * nb, n = nk * nb;
    uint16_t *hs = (uint16_t *)(void *)(vs + KVQ_S * plane);
    for (size_t j = 0; j < nk; j++)
        for (size_t b = 0; b < nb; b++)
            memcpy(hs + j * nb + b, vq + j * rb + b * bb, sizeof *hs);
    for (size_t i = n; i % VL; i++)
        hs[i] = 0;
    for (size_t i = 0; i < n; i += VL) {
        const V d = vload_half(hs + i);
        if (kind == KV_Q8) {
            vstore(vs + i, d);
            continue;
        }
#if BC_SIMD
        vstore(vs + i, vmul(d, vset1(32768.0f)));
        vstore(vs + plane + i, vmul(d, vset1(-32776.0f)));
        vstore(vs + 2 * plane + i, vmul(d, vset1(2048.0f)));
        vstore(vs + 3 * plane + i, vmul(d, vset1(-2056.0f)));
#else
        vstore(vs + i, d);
#endif
    }
}

// VL lanes from element i of the tile's keys (float or half kinds)
BC_INLINE V tile_k(const int kind, const kv_tile *t, size_t i)
{
    return kind == KV_F16 ? vload_half(t->k16 + i) : vload(t->k + i);
}

// VL lanes of value row j from column c (a multiple of VL; quantised: Dh a multiple of 32)
BC_INLINE V tile_v(const int kind, const kv_tile *t, size_t j, size_t c)
{
    if (kind == KV_Q8) {
        const size_t nb = t->ldv / BC_KVQ_BLOCK, b = c / BC_KVQ_BLOCK;
        const unsigned char *p = t->vq + j * t->vrb + b * 34 + 2 + c % BC_KVQ_BLOCK;
        return vmul(vload_i8((const int8_t *)p), vset1(t->vs[j * nb + b]));
    }
    if (kind == KV_Q4) {
        const size_t nb = t->ldv / BC_KVQ_BLOCK, b = c / BC_KVQ_BLOCK, k = c % BC_KVQ_BLOCK;
        const int hi = k >= 16;
        const float *s = t->vs + j * nb + b;  /* kv_vscales' planes */
        const unsigned char *p = t->vq + j * t->vrb + b * 18 + 2 + k % 16;
#if BC_SIMD
        const size_t plane = BC_ATT_BK * nb;
        return q4_vec(p, hi, vset1(s[2 * hi * plane]), vset1(s[(2 * hi + 1) * plane]));
#else
        return q4_vec(p, hi, vset1(s[0]), vzero());
#endif
    }
    return kind == KV_F16 ? vload_half(t->v16 + j * t->ldv + c) : vload(t->v + j * t->ldv + c);
}

/* One step d of the score chains (kq_scores' and heads_tile's): acc[g][a] =
 * fma(kd[a], q[g][d], acc[g][a]) for the hn heads and the tile's KLANES key vectors. */
// acc (hn, KLANES); kd (KLANES): the keys' values at d; q (hn, Dh) scaled
BC_INLINE void kq_step(const int hn, V acc[HMAX][KLANES], const V *kd, const float *q, size_t dh,
                       size_t d)
{
    BC_UNROLL
    for (int g = 0; g < hn; g++) {
        const V qd = vset1(q[(size_t)g * dh + d]);
        BC_UNROLL
        for (int a = 0; a < KLANES; a++)
            acc[g][a] = vfma(kd[a], qd, acc[g][a]);
    }
}

/* The scores of a quantised tile: acc[g][a] = fma over d, in order from 0, of
 * k[d] (lanes a VL..: the keys) and q[g][d], each key value the exact half(d) * q
 * (kq_tile's, read in place: the same chains). Scales are read once per 16 rows. */
// acc (hn, KLANES) from 0; q (hn, Dh) scaled; tl->kq: the tile of keys
BC_INLINE void kq_scores(const int hn, const int kind, V acc[HMAX][KLANES], const float *q,
                         const kv_tile *tl, size_t dh)
{
    const size_t bk = BC_ATT_BK, nb = dh / BC_KVQ_BLOCK;
    const uint16_t *sc = (const uint16_t *)(const void *)tl->kq;  /* 2-byte aligned */
    const unsigned char *qv = tl->kq + nb * bk * sizeof(uint16_t);
    for (size_t d0 = 0; d0 < dh; d0 += 16) {
        const size_t b = d0 / BC_KVQ_BLOCK;
        const int hi = d0 % BC_KVQ_BLOCK >= 16;
        V ks[KLANES], km[KLANES];
        BC_UNROLL
        for (int a = 0; a < KLANES; a++) {
            const V sv = vload_half(sc + b * bk + (size_t)a * VL);
#if BC_SIMD
            if (kind == KV_Q4) {
                ks[a] = vmul(sv, vset1(hi ? 2048.0f : 32768.0f));
                km[a] = vmul(sv, vset1(hi ? -2056.0f : -32776.0f));
                continue;
            }
#endif
            ks[a] = sv;
            km[a] = vzero();
        }
        for (size_t d = d0; d < d0 + 16; d++) {
            const unsigned char *row = kind == KV_Q8 ? qv + d * bk : qv + (b * 16 + d % 16) * bk;
            V kd[KLANES];
            BC_UNROLL
            for (int a = 0; a < KLANES; a++)
                kd[a] = kind == KV_Q8 ? vmul(vload_i8((const int8_t *)row + (size_t)a * VL), ks[a])
                                      : q4_vec(row + (size_t)a * VL, hi, ks[a], km[a]);
            kq_step(hn, acc, kd, q, dh, d);
        }
    }
}

/* o[c VL..] = fma(v[j][d0 + c VL..], p[j], o) for keys j = jf..nk-1 in turn,
 * from o * alpha (rescale) or 0: nc <= DCHUNK whole head-dim vectors side by
 * side, in registers. Keys before jf (before a sliding window) are not read. */
// o (nc VL), the tile's values (nk, ldv) from column d0, p (nk)
BC_INLINE void pv_chains(const int nc, const int kind, float *o, int rescale, float alpha,
                         const kv_tile *t, size_t d0, const float *p, size_t jf, size_t nk)
{
    V acc[DCHUNK];
    BC_UNROLL
    for (int c = 0; c < nc; c++)
        acc[c] = rescale ? vmul(vload(o + (size_t)c * VL), vset1(alpha)) : vzero();
    for (size_t j = jf; j < nk; j++) {
        const V pj = vset1(p[j]);
        BC_UNROLL
        for (int c = 0; c < nc; c++)
            acc[c] = vfma(tile_v(kind, t, j, d0 + (size_t)c * VL), pj, acc[c]);
    }
    BC_UNROLL
    for (int c = 0; c < nc; c++)
        vstore(o + (size_t)c * VL, acc[c]);
}

/* One tile of nk keys for hn <= HP query heads of one K/V head, side by side
 * (each head's chains are attn_unit's, in the same order; the heads only
 * interleave): scores s[g] = kt . q[g] (KLANES chains over d), the running
 * max m[g] and sum l[g] in key order, s[g] = exp(s[g] - max), then the output
 * o[g] rescaled by exp(old max - max) (when rescale) and fma'd with v[j] *
 * s[g][j] in key order. */
// q (hn, Dh) scaled; tl: the tile's keys (Dh, BK) transposed and values (nk, ldv) as kind
// lays them (halves and blocks: Dh whole vectors); s (hn, BK); o (hn, Dh); m, l (hn)
BC_INLINE void heads_tile(const int hn, const int kind, const float *q, const kv_tile *tl,
                          size_t dh, size_t jf, size_t nk, int rescale, float *s, float *o,
                          float *m, float *l)
{
    /* scores: hn x KLANES chains, each fma over d in order from 0 */
    V acc[HMAX][KLANES];
    BC_UNROLL
    for (int g = 0; g < hn; g++)
        BC_UNROLL
        for (int a = 0; a < KLANES; a++)
            acc[g][a] = vzero();
    if (kind == KV_Q8 || kind == KV_Q4)
        kq_scores(hn, kind, acc, q, tl, dh);
    else for (size_t d = 0; d < dh; d++) {
        V kd[KLANES];
        BC_UNROLL
        for (int a = 0; a < KLANES; a++)
            kd[a] = tile_k(kind, tl, d * BC_ATT_BK + (size_t)a * VL);
        kq_step(hn, acc, kd, q, dh, d);
    }
    BC_UNROLL
    for (int g = 0; g < hn; g++)
        BC_UNROLL
        for (int a = 0; a < KLANES; a++)
            vstore(s + (size_t)g * BC_ATT_BK + (size_t)a * VL, acc[g][a]);
    if (tl->softcap != 0.0f)  /* attn_unit's soft-cap, on the tile's nk keys */
        BC_UNROLL
        for (int g = 0; g < hn; g++)
            softcap_scores(s + (size_t)g * BC_ATT_BK, nk, tl->softcap);
    /* keys before a sliding window (the tile's first jf): score -inf, as attn_unit's mask */
    for (size_t j = 0; j < jf; j++)
        BC_UNROLL
        for (int g = 0; g < hn; g++)
            s[(size_t)g * BC_ATT_BK + j] = -INFINITY;
    /* the running max and sum of each head, in key order */
    float t[HMAX], lg[HMAX], alpha[HMAX];
    BC_UNROLL
    for (int g = 0; g < hn; g++)
        t[g] = m[g];
    for (size_t j = 0; j < nk; j++)
        BC_UNROLL
        for (int g = 0; g < hn; g++) {
            const float sj = s[(size_t)g * BC_ATT_BK + j];
            t[g] = t[g] > sj ? t[g] : sj;  /* vmax(t, s): the second operand on NaN */
        }
    BC_UNROLL
    for (int g = 0; g < hn; g++) {
        float al[VL];
        vstore(al, vexp(vset1(m[g] - t[g])));
        alpha[g] = al[0];
        float *sg = s + (size_t)g * BC_ATT_BK;
        BC_UNROLL
        for (int a = 0; a < KLANES; a++)
            vstore(sg + (size_t)a * VL, vexp(vsub(vload(sg + (size_t)a * VL), vset1(t[g]))));
        for (size_t j = 0; j < jf; j++)  /* exactly 0, as attn_unit's */
            sg[j] = 0.0f;
        lg[g] = l[g] * alpha[g];
    }
    for (size_t j = 0; j < nk; j++)
        BC_UNROLL
        for (int g = 0; g < hn; g++)
            lg[g] += s[(size_t)g * BC_ATT_BK + j];
    BC_UNROLL
    for (int g = 0; g < hn; g++) {
        m[g] = t[g];
        l[g] = lg[g];
    }
    /* PV: Dh = 4 vectors (64 on AVX-512) for every head side by side; else a
     * head at a time, up to DCHUNK head-dim vectors side by side. Each
     * head-dim vector is one chain: fma over the keys in order. */
    if (dh == 4 * VL) {
        V ov[HMAX][4];
        BC_UNROLL
        for (int g = 0; g < hn; g++)
            BC_UNROLL
            for (int c = 0; c < 4; c++)
                ov[g][c] = rescale ? vmul(vload(o + (size_t)g * dh + (size_t)c * VL), vset1(alpha[g]))
                                   : vzero();
        for (size_t j = jf; j < nk; j++) {
            V vj[4];
            BC_UNROLL
            for (int c = 0; c < 4; c++)
                vj[c] = tile_v(kind, tl, j, (size_t)c * VL);
            BC_UNROLL
            for (int g = 0; g < hn; g++) {
                const V pj = vset1(s[(size_t)g * BC_ATT_BK + j]);
                BC_UNROLL
                for (int c = 0; c < 4; c++)
                    ov[g][c] = vfma(vj[c], pj, ov[g][c]);
            }
        }
        BC_UNROLL
        for (int g = 0; g < hn; g++)
            BC_UNROLL
            for (int c = 0; c < 4; c++)
                vstore(o + (size_t)g * dh + (size_t)c * VL, ov[g][c]);
        return;
    }
    for (int g = 0; g < hn; g++) {
        const float *sg = s + (size_t)g * BC_ATT_BK;
        float *og = o + (size_t)g * dh;
        for (size_t d0 = 0; d0 < dh; d0 += DCHUNK * VL) {
            const size_t nc = min_sz(DCHUNK, (dh - d0 + VL - 1) / VL);
            const size_t last = min_sz(VL, dh - d0 - (nc - 1) * VL);  /* lanes of the last vector */
            if (last == VL) {  /* whole vectors: the accumulators stay in registers */
                float *od = og + d0;
                switch (nc) {
                case 8: pv_chains(8, kind, od, rescale, alpha[g], tl, d0, sg, jf, nk); break;
                case 7: pv_chains(7, kind, od, rescale, alpha[g], tl, d0, sg, jf, nk); break;
                case 6: pv_chains(6, kind, od, rescale, alpha[g], tl, d0, sg, jf, nk); break;
                case 5: pv_chains(5, kind, od, rescale, alpha[g], tl, d0, sg, jf, nk); break;
                case 4: pv_chains(4, kind, od, rescale, alpha[g], tl, d0, sg, jf, nk); break;
                case 3: pv_chains(3, kind, od, rescale, alpha[g], tl, d0, sg, jf, nk); break;
                case 2: pv_chains(2, kind, od, rescale, alpha[g], tl, d0, sg, jf, nk); break;
                default: pv_chains(1, kind, od, rescale, alpha[g], tl, d0, sg, jf, nk); break;
                }
                continue;
            }
            /* a part vector: floats only (a half cache's tile is widened first) */
            const float *vk = tl->v + d0;
            const size_t ldv = tl->ldv;
            V ov[DCHUNK];
            for (size_t c = 0; c < nc; c++) {
                const size_t nd = c + 1 < nc ? VL : last;
                ov[c] = rescale ? vmul(vloadn(og + d0 + c * VL, nd), vset1(alpha[g])) : vzero();
            }
            for (size_t j = jf; j < nk; j++) {
                const V pj = vset1(sg[j]);
                for (size_t c = 0; c < nc; c++)
                    ov[c] = vfma(vloadn(vk + j * ldv + c * VL, c + 1 < nc ? VL : last), pj, ov[c]);
            }
            for (size_t c = 0; c < nc; c++)
                vstoren(og + d0 + c * VL, ov[c], c + 1 < nc ? VL : last);
        }
    }
}

/* heads_tile with hn (1..HMAX) a compile-time constant; kind a constant in each copy */
BC_INLINE void heads_tile_n(size_t hn, const int kind, const float *q, const kv_tile *t,
                            size_t dh, size_t jf, size_t nk, int rescale, float *s, float *o,
                            float *m, float *l)
{
    switch (hn) {
    case 4: heads_tile(4, kind, q, t, dh, jf, nk, rescale, s, o, m, l); break;
    case 3: heads_tile(3, kind, q, t, dh, jf, nk, rescale, s, o, m, l); break;
    case 2: heads_tile(2, kind, q, t, dh, jf, nk, rescale, s, o, m, l); break;
    default: heads_tile(1, kind, q, t, dh, jf, nk, rescale, s, o, m, l); break;
    }
}

/* Query row i, query heads h0..h0+nh-1 (nh <= BQ, all reading K/V head
 * h0 / kv_group). scratch: attn_scratch(Dh) floats: the tile's keys
 * transposed (Dh, BK), then per head the scaled query (Dh), the output (Dh)
 * and the tile's scores (BK). Independent chains run side by side (the
 * tile's key vectors for the scores, the head-dim vectors for PV): the order
 * within each chain is attn_unit's. */
// out (Tq, H*Dh) row i, heads h0..h0+nh-1; q (Tq, .); k, v (Tk, KV*Dh) as bc_kv
static void attn_decode(const bc_attn *A, size_t i, size_t h0, size_t nh, float *scratch)
{
    const size_t dh = A->d_head, kvh = h0 / A->kv_group;
    const int half = A->k16 != NULL;  /* a half cache */
    const int direct = half && dh % VL == 0;  /* its halves read in place */
    const int quant = A->kq != NULL;  /* a quantised cache: its blocks read in place */
    const float *kh = half || quant ? NULL : A->k + kvh * A->khs;
    const float *vh = half || quant ? NULL : A->v + kvh * A->vhs;
    const int kind = !quant ? KV_F32 : A->kq_dtype == BC_DTYPE_Q8_0 ? KV_Q8 : KV_Q4;
    const float scale = 1.0f / sqrtf((float)dh);
    size_t kend = A->tk;
    if (A->causal)
        kend = min_sz(kend, A->q_pos0 + i + 1);
    /* a sliding window: keys from kfirst, tiles from the one holding it */
    const size_t qp = A->q_pos0 + i;
    const size_t kfirst = A->window && qp >= A->window ? qp + 1 - A->window : 0;
    const size_t kbeg = kfirst / BC_ATT_BK * BC_ATT_BK;
    float *kbuf = scratch, *qs = kbuf + dh * BC_ATT_BK, *o = qs + nh * dh, *sc = o + nh * dh;
    float *vbuf = kbuf + dh * BC_ATT_BK + (2 * dh + BC_ATT_BK) * BQ;
    if (kend == 0) {
        for (size_t g = 0; g < nh; g++)
            memset(A->out + i * A->ldo + (h0 + g) * dh, 0, dh * sizeof(float));
        return;
    }
    for (size_t g = 0; g < nh; g++)
        for (size_t d = 0; d < dh; d++)
            qs[g * dh + d] = A->q[i * A->ldq + (h0 + g) * dh + d] * scale;
    float m[BQ], l[BQ];
    for (size_t g = 0; g < nh; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    for (size_t j0 = kbeg; j0 < kend; j0 += BC_ATT_BK) {
        const size_t nk = min_sz(BC_ATT_BK, kend - j0);
        const size_t jr = A->ring ? j0 % A->ring : j0;  /* the tile's rows (a ring's slots) */
        const size_t jf = j0 < kfirst ? kfirst - j0 : 0;
        /* the tile's keys (Dh, BK) transposed: where they lie in a tiled cache
         * (keys past the length: computed, never used), floats or halves read
         * in place; else transposed here, VL x VL blocks in registers (keys
         * past nk zero). A half cache whose Dh is not whole vectors: the tile
         * widened to floats first. */
        kv_tile tl = {kbuf, vh ? vh + jr * A->ldv : NULL, NULL, NULL, A->ldv, A->softcap,
                      NULL, NULL, NULL, 0};
        if (quant) {  /* the keys' tile in place (keys past the length: computed, never
                       * used), the values' rows with their scales as floats in vbuf */
            tl.kq = A->kq + bc_kvq_bytes(A->kq_dtype, kvh * A->khs + jr * dh);
            tl.vq = A->vq + bc_kvq_bytes(A->kq_dtype, kvh * A->vhs + jr * dh);
            tl.vrb = bc_kvq_bytes(A->kq_dtype, dh);
            tl.ldv = dh;
            kv_vscales(vbuf, tl.vq, tl.vrb, kind, nk, dh / BC_KVQ_BLOCK);
            tl.vs = vbuf;
        } else if (direct) {
            tl.k16 = A->k16 + kvh * A->khs + jr * dh;
            tl.v16 = A->v16 + kvh * A->vhs + jr * A->ldv;
        } else if (half) {
            kv_widen(kbuf, vbuf, A->k16 + kvh * A->khs + jr * dh,
                     A->v16 + kvh * A->vhs + jr * A->ldv, A->ldv, nk, dh);
            tl.v = vbuf;
            tl.ldv = dh;
        } else if (A->k_tiled) {
            tl.k = kh + jr * dh;
        } else {
            kv_transpose(kbuf, kh + jr * A->ldk, A->ldk, nk, dh);
        }
        const int rescale = j0 > kbeg;
        for (size_t g = 0; g < nh; g += HP) {  /* HP heads side by side: their chains in flight */
            const float *qg = qs + g * dh;
            float *sg = sc + g * BC_ATT_BK, *og = o + g * dh;
            const size_t hn = min_sz(HP, nh - g);
            if (kind == KV_Q8)
                heads_tile_n(hn, KV_Q8, qg, &tl, dh, jf, nk, rescale, sg, og, m + g, l + g);
            else if (kind == KV_Q4)
                heads_tile_n(hn, KV_Q4, qg, &tl, dh, jf, nk, rescale, sg, og, m + g, l + g);
            else if (direct)
                heads_tile_n(hn, KV_F16, qg, &tl, dh, jf, nk, rescale, sg, og, m + g, l + g);
            else
                heads_tile_n(hn, KV_F32, qg, &tl, dh, jf, nk, rescale, sg, og, m + g, l + g);
        }
    }
    for (size_t g = 0; g < nh; g++) {
        float *oi = A->out + i * A->ldo + (h0 + g) * dh;
        const float inv = 1.0f / l[g];
        for (size_t d = 0; d < dh; d++)
            oi[d] = o[g * dh + d] * inv;
    }
}

/* ======================================================================== */
/* Attention backward, flash style: no (T, T) matrix. For query i and key j  */
/* of one head, s = (q_i . k_j) / sqrt(Dh) recomputed, p = exp(s - lse_i),   */
/* dv_j += p do_i, dp = do_i . v_j, ds = p (dp - D_i) / sqrt(Dh) with        */
/* D_i = do_i . o_i, dk_j += ds q_i, dq_i += ds k_j. Keys and queries are    */
/* each owned by one unit (dk, dv by key tile, dq by query tile), so nothing */
/* is added from two threads and the bits do not depend on them. Within a   */
/* unit every product is a register tile (abk: MR rows by two vectors of     */
/* lanes) over blocks of BC_ATT_BK queries and keys: scores and dp of a      */
/* block at once, the keys and values transposed once per key tile.         */
/* ======================================================================== */

/* dst[i ldc + l] = (accumulate ? dst[i ldc + l] : 0) + sum_t a[i sa + t st] b[t ldb + l]
 * for rb rows i (1..MR) and the first nl lanes l (nl = 2 VL, or fewer when
 * part: loads and stores masked). One fma chain per element, t in order. */
BC_INLINE void abk(const int rb, const int part, size_t nt, const float *restrict a, size_t sa,
                   size_t st, const float *restrict b, size_t ldb, size_t nl,
                   float *restrict dst, size_t ldc, int accumulate)
{
    const size_t n0 = part ? min_sz(nl, VL) : VL, n1 = part ? nl - n0 : VL;
    V c0[MR], c1[MR];
    BC_UNROLL
    for (int i = 0; i < rb; i++) {
        if (!accumulate) {
            c0[i] = vzero();
            c1[i] = vzero();
        } else if (part) {
            c0[i] = vloadn(dst + i * ldc, n0);
            c1[i] = vloadn(dst + i * ldc + VL, n1);
        } else {
            c0[i] = vload(dst + i * ldc);
            c1[i] = vload(dst + i * ldc + VL);
        }
    }
    for (size_t t = 0; t < nt; t++) {
        const float *bt = b + t * ldb, *at = a + t * st;
        const V b0 = part ? vloadn(bt, n0) : vload(bt);
        const V b1 = part ? vloadn(bt + VL, n1) : vload(bt + VL);
        BC_UNROLL
        for (int i = 0; i < rb; i++) {
            const V av = vset1(at[i * sa]);
            c0[i] = vfma(av, b0, c0[i]);
            c1[i] = vfma(av, b1, c1[i]);
        }
    }
    BC_UNROLL
    for (int i = 0; i < rb; i++) {
        if (part) {
            vstoren(dst + i * ldc, c0[i], n0);
            vstoren(dst + i * ldc + VL, c1[i], n1);
        } else {
            vstore(dst + i * ldc, c0[i]);
            vstore(dst + i * ldc + VL, c1[i]);
        }
    }
}

/* abk() with rb a compile-time constant; part a constant in each copy */
BC_INLINE void abk_rb(const int part, int rb, size_t nt, const float *a, size_t sa, size_t st,
                      const float *b, size_t ldb, size_t nl, float *dst, size_t ldc,
                      int accumulate)
{
    switch (rb) {
    case 1: abk(1, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 2: abk(2, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 3: abk(3, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 4: abk(4, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
#if MR >= 6
    case 5: abk(5, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 6: abk(6, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
#endif
#if MR >= 14
    case 7: abk(7, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 8: abk(8, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 9: abk(9, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 10: abk(10, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 11: abk(11, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 12: abk(12, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 13: abk(13, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
    case 14: abk(14, part, nt, a, sa, st, b, ldb, nl, dst, ldc, accumulate); break;
#endif
    default: break;
    }
}

/* dst (n, nl; ldc) (+)= A (n, nt; rows sa, terms st) . B (nt, nl; ldb), in
 * register tiles of MR rows and 2 VL lanes (the last lanes masked) */
static void abk_rows(size_t n, size_t nl, size_t nt, const float *a, size_t sa, size_t st,
                     const float *b, size_t ldb, float *dst, size_t ldc, int accumulate)
{
    for (size_t l = 0; l < nl; l += 2 * VL) {
        const size_t w = min_sz(2 * VL, nl - l);
        for (size_t i = 0; i < n; i += MR) {
            const int rb = (int)min_sz(MR, n - i);
            if (w == 2 * VL)
                abk_rb(0, rb, nt, a + i * sa, sa, st, b + l, ldb, w, dst + i * ldc + l, ldc,
                       accumulate);
            else
                abk_rb(1, rb, nt, a + i * sa, sa, st, b + l, ldb, w, dst + i * ldc + l, ldc,
                       accumulate);
        }
    }
}

/* Queries q0..q0+nq of head h against the key tile j0..j0+nk, whose keys and
 * values kt, vt are transposed (kv_transpose): s (nq, BK) = q . k and dp
 * (nq, BK) = do . v as tiles, then in place p = exp(s / sqrt(Dh) - lse_i) and
 * ds = p (dp - D_i) / sqrt(Dh). Lanes of keys the query does not see (causal)
 * or past nk are exactly 0 in both. */
// s, dp (nq, BK); kt, vt (Dh, BK); q, do (T, H*Dh) rows q0.. of head h; lse, D (H, T)
static void ab_block(float *s, float *dp, const float *kt, const float *vt, const bc_attn_bwd *A,
                     size_t h, size_t q0, size_t nq, size_t j0, size_t nk)
{
    const size_t dh = A->d_head, ncol = (nk + 2 * VL - 1) / (2 * VL) * (2 * VL);
    const V sc = vset1(1.0f / sqrtf((float)dh));
    abk_rows(nq, ncol, dh, A->q + q0 * A->ldq + h * dh, A->ldq, 1, kt, BC_ATT_BK, s,
             BC_ATT_BK, 0);
    abk_rows(nq, ncol, dh, A->dout + q0 * A->ldo + h * dh, A->ldo, 1, vt, BC_ATT_BK, dp,
             BC_ATT_BK, 0);
    for (size_t i = 0; i < nq; i++) {
        const size_t qi = q0 + i;
        const size_t lim = !A->causal ? nk : qi < j0 ? 0 : min_sz(nk, qi - j0 + 1);
        const V lse = vset1(A->lse[h * A->t + qi]), di = vset1(A->dsum[h * A->t + qi]);
        float *si = s + i * BC_ATT_BK, *dpi = dp + i * BC_ATT_BK;
        for (size_t l = 0; l < ncol; l += VL) {
            V p = vexp(vsub(vmul(vload(si + l), sc), lse));
            V ds = vmul(vmul(p, vsub(vload(dpi + l), di)), sc);
            if (l + VL > lim) {
                const size_t keep = lim > l ? lim - l : 0;
                p = vkeep_lo(vzero(), p, keep);
                ds = vkeep_lo(vzero(), ds, keep);
            }
            vstore(si + l, p);
            vstore(dpi + l, ds);
        }
    }
}

/* kt, vt (Dh, BK), s, dp (BK, BK), dk, dv (BK, Dh); attn_bwd_q uses the first four and dq (BK, Dh) */
static size_t attn_bwd_scratch(size_t d_head)
{
    return 4 * BC_ATT_BK * d_head + 2 * BC_ATT_BK * BC_ATT_BK;
}

/* dk, dv of K/V head g, keys [j0, j0 + BK): every query head of the group in
 * order, the queries that see them in blocks of BK, in order. */
// dk, dv (T, KV*Dh) rows j0..j0+BK of K/V head g; q, do (T, H*Dh); k, v (T, KV*Dh); lse, D (H, T)
static void attn_bwd_kv(const bc_attn_bwd *A, size_t g, size_t j0, float *scratch)
{
    const size_t dh = A->d_head, t = A->t, nk = min_sz(BC_ATT_BK, t - j0);
    float *kt = scratch, *vt = kt + dh * BC_ATT_BK, *s = vt + dh * BC_ATT_BK;
    float *dp = s + BC_ATT_BK * BC_ATT_BK, *dk = dp + BC_ATT_BK * BC_ATT_BK;
    float *dv = dk + BC_ATT_BK * dh;
    kv_transpose(kt, A->k + j0 * A->ldq + g * dh, A->ldq, nk, dh);
    kv_transpose(vt, A->v + j0 * A->ldq + g * dh, A->ldq, nk, dh);
    memset(dk, 0, 2 * BC_ATT_BK * dh * sizeof(float));
    for (size_t h = g * A->kv_group; h < (g + 1) * A->kv_group; h++) {
        for (size_t q0 = A->causal ? j0 : 0; q0 < t; q0 += BC_ATT_BK) {
            const size_t nq = min_sz(BC_ATT_BK, t - q0);
            const float *q = A->q + q0 * A->ldq + h * dh, *dout = A->dout + q0 * A->ldo + h * dh;
            ab_block(s, dp, kt, vt, A, h, q0, nq, j0, nk);
            /* dv (nk, Dh) += p^T do, dk (nk, Dh) += ds^T q */
            abk_rows(nk, dh, nq, s, 1, BC_ATT_BK, dout, A->ldo, dv, dh, 1);
            abk_rows(nk, dh, nq, dp, 1, BC_ATT_BK, q, A->ldq, dk, dh, 1);
        }
    }
    for (size_t j = 0; j < nk; j++) {
        memcpy(A->dk + (j0 + j) * A->ldd + g * dh, dk + j * dh, dh * sizeof(float));
        memcpy(A->dv + (j0 + j) * A->ldd + g * dh, dv + j * dh, dh * sizeof(float));
    }
}

/* dq of query head h, queries [i0, i0 + BK): the keys they see, in tiles of BK, in order. */
// dq (T, H*Dh) rows i0..i0+BK of head h; q, do (T, H*Dh); k, v (T, KV*Dh); lse, D (H, T)
static void attn_bwd_q(const bc_attn_bwd *A, size_t h, size_t i0, float *scratch)
{
    const size_t dh = A->d_head, t = A->t, nq = min_sz(BC_ATT_BK, t - i0);
    const size_t g = h / A->kv_group, kend = A->causal ? i0 + nq : t;
    float *kt = scratch, *vt = kt + dh * BC_ATT_BK, *s = vt + dh * BC_ATT_BK;
    float *dp = s + BC_ATT_BK * BC_ATT_BK, *dq = dp + BC_ATT_BK * BC_ATT_BK;
    memset(dq, 0, nq * dh * sizeof(float));
    for (size_t j0 = 0; j0 < kend; j0 += BC_ATT_BK) {
        const size_t nk = min_sz(BC_ATT_BK, kend - j0);
        const float *k = A->k + j0 * A->ldq + g * dh;
        kv_transpose(kt, k, A->ldq, nk, dh);
        kv_transpose(vt, A->v + j0 * A->ldq + g * dh, A->ldq, nk, dh);
        ab_block(s, dp, kt, vt, A, h, i0, nq, j0, nk);
        /* dq (nq, Dh) += ds k */
        abk_rows(nq, dh, nk, dp, BC_ATT_BK, 1, k, A->ldq, dq, dh, 1);
    }
    for (size_t i = 0; i < nq; i++)
        memcpy(A->dq + (i0 + i) * A->ldd + h * dh, dq + i * dh, dh * sizeof(float));
}

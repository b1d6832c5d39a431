/* kquant.c: llama.cpp's reference K-quantisers (quantize_row_q4_K_ref,
 * quantize_row_q5_K_ref, quantize_row_q6_K_ref) over the 16 rows of a panel at
 * once (bc_kquant.h). The rows are lanes: each lane runs the one-row rule's
 * operations in the rule's order (make_qkx2_quants' and make_qx_quants' sums
 * weight by weight, float32, no FMA: the build's -ffp-contract=off), so the
 * bytes are the rule's; the lanes' loops are what the compiler vectorises
 * (issue 51: the scalar rule took some 210 ns a weight; saving a 1B model as
 * Q4_K_M took minutes). On x86-64 the same code is compiled a second time for
 * AVX-512 and chosen when the CPU has it: the same operations, the same bits.
 *
 * Rounding: ggml's nearest_int, (v + 1.5 2^23) - 1.5 2^23, round half to even,
 * exact for |v| < 2^22; every value rounded here is first clipped to the
 * levels' range (|v| <= 32), as the one-row rule clips. */
#include <math.h>
#include <string.h>

#include "bc_half.h"
#include "bc_kquant.h"

#define NL BC_PANEL
/* lanes of a batch: KG sub-blocks of the panel's 16 rows, whose independent chains of
 * sums hide one another's latency */
#define KG 4
#define KL (KG * NL)
#define KQ_MAGIC 12582912.0f  /* 1.5 2^23 */
#define Q6K_GROUP_EPS 1e-15f  /* ggml's GROUP_MAX_EPS */

#if defined(__GNUC__) || defined(__clang__)
#define KQ_INLINE static inline __attribute__((always_inline))
#else
#define KQ_INLINE static inline
#endif

/* nearest integer, ties to even, of |v| < 2^22 */
KQ_INLINE float kq_rnd(float v)
{
    return (v + KQ_MAGIC) - KQ_MAGIC;
}

/* make_qkx2's level of v: 0 for NaN, negative or infinite v, else nearest(v)
 * clipped to 0..hi */
KQ_INLINE float kq_level(float v, float hi)
{
    const float r = kq_rnd(v < hi ? v : hi);
    return v >= 0.0f && v != INFINITY ? r : 0.0f;
}

/* make_qkx2_quants(32, nmax, x, w, L, &min, Laux, rmin, 0.1, nstep, false) for
 * one sub-block of every lane: scale s, -min (mn) and levels L (as floats).
 * s, mn (16), L (32, 16) <- x, w (32, 16) */
KQ_INLINE void kq_qkx2(float s[KL], float mn[KL], float L[32][KL], const float x[32][KL],
                       const float w[32][KL], int nmax, float rmin, int nstep)
{
    float lo[KL], hi[KL], sw[KL], sx[KL], best[KL], sc[KL], flat[KL], isc0[KL];
    float La[32][KL], sl[KL], sl2[KL], sxl[KL], ts[KL], tm[KL], mad[KL], take[KL];
    const float fmax = (float)nmax;
    for (int l = 0; l < KL; l++) {
        lo[l] = x[0][l];
        hi[l] = x[0][l];
        sw[l] = 0.0f;
        sx[l] = 0.0f;
    }
    for (int i = 0; i < 32; i++)
        for (int l = 0; l < KL; l++) {
            lo[l] = x[i][l] < lo[l] ? x[i][l] : lo[l];
            hi[l] = x[i][l] > hi[l] ? x[i][l] : hi[l];
            sw[l] += w[i][l];
            sx[l] += w[i][l] * x[i][l];
        }
    for (int l = 0; l < KL; l++) {
        lo[l] = lo[l] > 0.0f ? 0.0f : lo[l];
        flat[l] = hi[l] == lo[l] ? 1.0f : 0.0f;  /* L 0, scale 0, the min -lo */
        isc0[l] = fmax / (flat[l] != 0.0f ? 1.0f : hi[l] - lo[l]);
        sc[l] = 1.0f / isc0[l];
        best[l] = 0.0f;
    }
    for (int i = 0; i < 32; i++)
        for (int l = 0; l < KL; l++) {
            L[i][l] = kq_level(isc0[l] * (x[i][l] - lo[l]), fmax);
            const float diff = sc[l] * L[i][l] + lo[l] - x[i][l];
            best[l] += w[i][l] * (diff * diff);
        }
    for (int is = 0; is <= nstep; is++) {
        const float num = rmin + 0.1f * (float)is + fmax;
        float isc[KL];
        for (int l = 0; l < KL; l++) {
            /* llama.cpp divides by max - min with min the best so far */
            isc[l] = num / (flat[l] != 0.0f ? 1.0f : hi[l] - lo[l]);
            sl[l] = 0.0f;
            sl2[l] = 0.0f;
            sxl[l] = 0.0f;
        }
        for (int i = 0; i < 32; i++)
            for (int l = 0; l < KL; l++) {
                La[i][l] = kq_level(isc[l] * (x[i][l] - lo[l]), fmax);
                const float wl = w[i][l] * La[i][l];
                sl[l] += wl;
                sl2[l] += wl * La[i][l];
                sxl[l] += wl * x[i][l];
            }
        for (int l = 0; l < KL; l++) {
            const float D = sw[l] * sl2[l] - sl[l] * sl[l];
            const float Ds = D > 0.0f ? D : 1.0f;
            float a = (sw[l] * sxl[l] - sx[l] * sl[l]) / Ds;
            float m = (sl2[l] * sx[l] - sl[l] * sxl[l]) / Ds;
            const float s2 = sl2[l] != 0.0f ? sl2[l] : 1.0f;
            const float alt = sxl[l] / s2;
            a = m > 0.0f ? alt : a;
            m = m > 0.0f ? 0.0f : m;
            ts[l] = a;
            tm[l] = m;
            mad[l] = 0.0f;
            take[l] = D > 0.0f && flat[l] == 0.0f ? 1.0f : 0.0f;
        }
        for (int i = 0; i < 32; i++)
            for (int l = 0; l < KL; l++) {
                const float diff = ts[l] * La[i][l] + tm[l] - x[i][l];
                mad[l] += w[i][l] * (diff * diff);
            }
        int any = 0;
        for (int l = 0; l < KL; l++) {
            take[l] = take[l] != 0.0f && mad[l] < best[l] ? 1.0f : 0.0f;
            best[l] = take[l] != 0.0f ? mad[l] : best[l];
            sc[l] = take[l] != 0.0f ? ts[l] : sc[l];
            lo[l] = take[l] != 0.0f ? tm[l] : lo[l];
            any |= take[l] != 0.0f;
        }
        if (any)
            for (int i = 0; i < 32; i++)
                for (int l = 0; l < KL; l++)
                    L[i][l] = take[l] != 0.0f ? La[i][l] : L[i][l];
    }
    for (int l = 0; l < KL; l++) {
        s[l] = flat[l] != 0.0f ? 0.0f : sc[l];
        mn[l] = -lo[l];
    }
    for (int i = 0; i < 32; i++)
        for (int l = 0; l < KL; l++)
            L[i][l] = flat[l] != 0.0f ? 0.0f : L[i][l];
}

/* sub-blocks g = 0..KG-1 of n columns from column c0 of the tile's rows as lanes
 * g NL + l (rows >= nl zero). x (n, KL) <- tile (nl rows) */
KQ_INLINE void kq_lanes(float (*x)[KL], const float *tile, size_t ld, size_t nl, size_t c0,
                        int n)
{
    for (int i = 0; i < n; i++)
        for (size_t g = 0; g < KG; g++)
            for (size_t l = 0; l < NL; l++)
                x[i][g * NL + l] = l < nl ? tile[l * ld + c0 + g * (size_t)n + (size_t)i] : 0.0f;
}

/* 0..63: ggml's MIN(63, (uint8_t)nearest_int(inv * v)) (any v: rintf) */
static uint8_t kq_six(float inv, float v)
{
    const uint8_t u = (uint8_t)(int)rintf(inv * v);
    return u < 63 ? u : 63;
}

KQ_INLINE void kq_panel_body(bc_q4k_block *b, uint8_t L[256][NL], const float *tile, size_t ld,
                             size_t nl, int nmax, float rmin, int nstep)
{
    float x[32][KL], w[32][KL], Lf[32][KL], s[KL], mn[KL], scales[8][NL], mins[8][NL];
    const float fmax = (float)nmax;
    for (int j0 = 0; j0 < 8; j0 += KG) {
        kq_lanes(x, tile, ld, nl, (size_t)(32 * j0), 32);
        float sum_x2[KL], av[KL];
        for (int l = 0; l < KL; l++)
            sum_x2[l] = 0.0f;
        for (int i = 0; i < 32; i++)
            for (int l = 0; l < KL; l++)
                sum_x2[l] += x[i][l] * x[i][l];
        for (int l = 0; l < KL; l++)
            av[l] = sqrtf(sum_x2[l] / 32.0f);
        for (int i = 0; i < 32; i++)
            for (int l = 0; l < KL; l++)
                w[i][l] = av[l] + fabsf(x[i][l]);
        kq_qkx2(s, mn, Lf, x, w, nmax, rmin, nstep);
        for (int g = 0; g < KG; g++)
            for (int l = 0; l < NL; l++) {
                scales[j0 + g][l] = s[g * NL + l];
                mins[j0 + g][l] = mn[g * NL + l];
                for (int i = 0; i < 32; i++)
                    L[32 * (j0 + g) + i][l] = (uint8_t)Lf[i][g * NL + l];
            }
    }
    float dj[8][NL], dm[8][NL];
    for (size_t l = 0; l < NL; l++) {
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 8; j++) {
            max_scale = scales[j][l] > max_scale ? scales[j][l] : max_scale;
            max_min = mins[j][l] > max_min ? mins[j][l] : max_min;
        }
        const float inv_s = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
        const float inv_m = max_min > 0.0f ? 63.0f / max_min : 0.0f;
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = kq_six(inv_s, scales[j][l]);
            m[j] = kq_six(inv_m, mins[j][l]);
        }
        const uint16_t dh = bc_f32_to_half(max_scale / 63.0f);
        const uint16_t mh = bc_f32_to_half(max_min / 63.0f);
        const float d = bc_half_to_f32(dh), dmin = bc_half_to_f32(mh);
        for (int j = 0; j < 8; j++) {
            dj[j][l] = d * (float)sc[j];
            dm[j][l] = dmin * (float)m[j];
        }
        if (l < nl) {
            b->d[l] = dh;
            b->dmin[l] = mh;
            for (int j = 0; j < 8; j++) {
                b->sc[j][l] = sc[j];
                b->m[j][l] = m[j];
            }
        }
    }
    /* every weight again against its stored scale and min, where d sc is not 0 */
    for (int j0 = 0; j0 < 8; j0 += KG) {
        kq_lanes(x, tile, ld, nl, (size_t)(32 * j0), 32);
        float dk[KL], mk[KL], dd[KL];
        for (int g = 0; g < KG; g++)
            for (int l = 0; l < NL; l++) {
                dk[g * NL + l] = dj[j0 + g][l];
                mk[g * NL + l] = dm[j0 + g][l];
                for (int i = 0; i < 32; i++)
                    w[i][g * NL + l] = (float)L[32 * (j0 + g) + i][l];  /* (w: the levels) */
            }
        for (int l = 0; l < KL; l++)
            dd[l] = dk[l] != 0.0f ? dk[l] : 1.0f;
        for (int i = 0; i < 32; i++)
            for (int l = 0; l < KL; l++) {
                const float v = (x[i][l] + mk[l]) / dd[l];
                const float q = v > 0.0f ? kq_rnd(v < fmax ? v : fmax) : 0.0f;
                Lf[i][l] = dk[l] != 0.0f ? q : w[i][l];
            }
        for (int g = 0; g < KG; g++)
            for (int l = 0; l < NL; l++)
                for (int i = 0; i < 32; i++)
                    L[32 * (j0 + g) + i][l] = (uint8_t)Lf[i][g * NL + l];
    }
}

/* make_qx_quants(16, 32, x, L, rmse_type 1, NULL) for one sub-block of every
 * lane: the scale s and levels L (0..63, as floats) */
KQ_INLINE void q6k_sums(float lv[16][KL], float a[KL], float b[KL], const float x[16][KL],
                        const float isc[KL])
{
    for (int l = 0; l < KL; l++) {
        a[l] = 0.0f;
        b[l] = 0.0f;
    }
    for (int i = 0; i < 16; i++)
        for (int l = 0; l < KL; l++) {
            float v = isc[l] * x[i][l];
            v = v < -32.0f ? -32.0f : v > 31.0f ? 31.0f : v;
            const float q = kq_rnd(v), w = x[i][l] * x[i][l];
            lv[i][l] = q;
            a[l] += w * x[i][l] * q;
            b[l] += w * q * q;
        }
}

KQ_INLINE void q6k_qx(float s[KL], float L[16][KL], const float x[16][KL])
{
    float amax[KL], mx[KL], isc[KL], sumlx[KL], suml2[KL], best[KL], lv[16][KL], take[KL];
    for (int l = 0; l < KL; l++) {
        amax[l] = 0.0f;
        mx[l] = 0.0f;
    }
    for (int i = 0; i < 16; i++)
        for (int l = 0; l < KL; l++) {
            const float a = fabsf(x[i][l]);
            mx[l] = a > amax[l] ? x[i][l] : mx[l];
            amax[l] = a > amax[l] ? a : amax[l];
        }
    for (int l = 0; l < KL; l++) {
        mx[l] = amax[l] < Q6K_GROUP_EPS ? 1.0f : mx[l];  /* (a zero lane: its result is 0) */
        isc[l] = -32.0f / mx[l];
    }
    q6k_sums(L, sumlx, suml2, x, isc);
    for (int l = 0; l < KL; l++) {
        s[l] = suml2[l] != 0.0f ? sumlx[l] / (suml2[l] != 0.0f ? suml2[l] : 1.0f) : 0.0f;
        best[l] = s[l] * sumlx[l];
    }
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        const float num = -(32.0f + 0.1f * (float)is);
        for (int l = 0; l < KL; l++)
            isc[l] = num / mx[l];
        q6k_sums(lv, sumlx, suml2, x, isc);
        int any = 0;
        for (int l = 0; l < KL; l++) {
            take[l] = suml2[l] > 0.0f && sumlx[l] * sumlx[l] > best[l] * suml2[l] ? 1.0f : 0.0f;
            const float ns = sumlx[l] / (suml2[l] > 0.0f ? suml2[l] : 1.0f);
            s[l] = take[l] != 0.0f ? ns : s[l];
            best[l] = take[l] != 0.0f ? ns * sumlx[l] : best[l];
            any |= take[l] != 0.0f;
        }
        if (any)
            for (int i = 0; i < 16; i++)
                for (int l = 0; l < KL; l++)
                    L[i][l] = take[l] != 0.0f ? lv[i][l] : L[i][l];
    }
    for (int l = 0; l < KL; l++)
        s[l] = amax[l] < Q6K_GROUP_EPS ? 0.0f : s[l];
    for (int i = 0; i < 16; i++)
        for (int l = 0; l < KL; l++)
            L[i][l] = amax[l] < Q6K_GROUP_EPS ? 0.0f : L[i][l] + 32.0f;
}

KQ_INLINE void q6k_panel_body(bc_q6k_block *b, const float *tile, size_t ld, size_t nl)
{
    float x[16][KL], Lf[16][KL], s[KL], scales[16][NL], dj[16][NL];
    uint8_t L[256][NL];
    for (int j0 = 0; j0 < 16; j0 += KG) {
        kq_lanes(x, tile, ld, nl, (size_t)(16 * j0), 16);
        q6k_qx(s, Lf, x);
        for (int g = 0; g < KG; g++)
            for (int l = 0; l < NL; l++) {
                scales[j0 + g][l] = s[g * NL + l];
                for (int i = 0; i < 16; i++)
                    L[16 * (j0 + g) + i][l] = (uint8_t)Lf[i][g * NL + l];
            }
    }
    int zero[NL];
    for (size_t l = 0; l < NL; l++) {
        float max_scale = 0.0f, max_abs = 0.0f;
        for (int j = 0; j < 16; j++)
            if (fabsf(scales[j][l]) > max_abs) {
                max_abs = fabsf(scales[j][l]);
                max_scale = scales[j][l];
            }
        zero[l] = max_abs < Q6K_GROUP_EPS;
        for (int j = 0; j < 16; j++)
            dj[j][l] = 0.0f;
        if (zero[l]) {  /* the whole super-block zero, as llama.cpp's memset */
            if (l < nl) {
                b->d[l] = 0;
                for (int j = 0; j < 16; j++)
                    b->sc[j][l] = 0;
            }
            continue;
        }
        const float iscale = -128.0f / max_scale;
        const uint16_t dh = bc_f32_to_half(1.0f / iscale);
        const float d = bc_half_to_f32(dh);
        for (int j = 0; j < 16; j++) {
            const int si = (int)rintf(iscale * scales[j][l]);  /* |.| <= 128 */
            const int8_t s8 = (int8_t)(si < 127 ? si : 127);
            dj[j][l] = d * (float)s8;
            if (l < nl)
                b->sc[j][l] = s8;
        }
        if (l < nl)
            b->d[l] = dh;
    }
    /* every weight again against its stored scale, where d sc is not 0 */
    for (int j0 = 0; j0 < 16; j0 += KG) {
        kq_lanes(x, tile, ld, nl, (size_t)(16 * j0), 16);
        float dk[KL], dd[KL], lv[16][KL];
        for (int g = 0; g < KG; g++)
            for (int l = 0; l < NL; l++) {
                dk[g * NL + l] = dj[j0 + g][l];
                for (int i = 0; i < 16; i++)
                    lv[i][g * NL + l] = (float)L[16 * (j0 + g) + i][l];
            }
        for (int l = 0; l < KL; l++)
            dd[l] = dk[l] != 0.0f ? dk[l] : 1.0f;
        for (int i = 0; i < 16; i++)
            for (int l = 0; l < KL; l++) {
                float v = x[i][l] / dd[l];
                v = v < -32.0f ? -32.0f : v > 31.0f ? 31.0f : v;
                const float q = kq_rnd(v) + 32.0f;
                Lf[i][l] = dk[l] != 0.0f ? q : lv[i][l];
            }
        for (int g = 0; g < KG; g++)
            for (int l = 0; l < NL; l++)
                for (int i = 0; i < 16; i++)
                    L[16 * (j0 + g) + i][l] = (uint8_t)Lf[i][g * NL + l];
    }
    for (size_t l = 0; l < nl; l++)
        for (int t = 0; t < 256; t++)
            b->q[t][l] = zero[l] ? (int8_t)-32 : (int8_t)(L[t][l] - 32);
}

/* ---- the entry points: AVX-512's copy where the CPU has it --------------- */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KQ_X86 1
__attribute__((target("avx512f,avx512bw"))) static void
kq_panel_avx512(bc_q4k_block *b, uint8_t L[256][NL], const float *tile, size_t ld, size_t nl,
                int nmax, float rmin, int nstep)
{
    kq_panel_body(b, L, tile, ld, nl, nmax, rmin, nstep);
}

__attribute__((target("avx512f,avx512bw"))) static void
q6k_panel_avx512(bc_q6k_block *b, const float *tile, size_t ld, size_t nl)
{
    q6k_panel_body(b, tile, ld, nl);
}

static int kq_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}
#endif

// b (16 rows) <- tile (nl rows, 256 columns)
void bc_kq_panel(bc_q4k_block *b, uint8_t L[256][BC_PANEL], const float *tile, size_t ld,
                 size_t nl, int nmax, float rmin, int nstep)
{
#ifdef KQ_X86
    if (kq_avx512()) {
        kq_panel_avx512(b, L, tile, ld, nl, nmax, rmin, nstep);
        return;
    }
#endif
    kq_panel_body(b, L, tile, ld, nl, nmax, rmin, nstep);
}

// b (16 rows) <- tile (nl rows, 256 columns)
void bc_q6k_panel(bc_q6k_block *b, const float *tile, size_t ld, size_t nl)
{
#ifdef KQ_X86
    if (kq_avx512()) {
        q6k_panel_avx512(b, tile, ld, nl);
        return;
    }
#endif
    q6k_panel_body(b, tile, ld, nl);
}

/* bc_half.h: INTERNAL float <-> IEEE half and float -> bfloat16 conversions,
 * portable and exact (round to nearest, ties to even), for packing weights. */
#ifndef BC_HALF_H
#define BC_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t bc_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bc_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float -> bfloat16 bits: the high half, rounded to nearest even; NaN stays a
 * (quiet) NaN, infinities stay infinite (what torch's .to(bfloat16) does). */
static inline uint16_t bc_f32_to_bf16(float f)
{
    const uint32_t u = bc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* bc_f32_to_bf16, then a subnormal result as a zero of its sign: bfloat16i's
 * weights and rows of x (vdpbf16ps reads subnormals as zeros; stored so, every
 * instruction set reads the same) */
static inline uint16_t bc_f32_to_bf16_ftz(float f)
{
    const uint16_t h = bc_f32_to_bf16(f);
    return (h & 0x7f80u) == 0 ? (uint16_t)(h & 0x8000u) : h;
}

/* float -> IEEE half bits, rounded to nearest even; overflow gives infinity,
 * NaN a quiet NaN, tiny values subnormals or zero. */
static inline uint16_t bc_f32_to_half(float f)
{
    const uint32_t u = bc_f32_bits(f), sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u)  /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {  /* below 2^-14: a subnormal half (or zero) */
        /* the value in units of 2^-24, rounded to nearest even */
        const float scaled = bc_bits_f32(a) * 16777216.0f;  /* exact: a power of two */
        uint32_t m = (uint32_t)scaled;
        const float rest = scaled - (float)m;
        if (rest > 0.5f || (rest == 0.5f && (m & 1u)))
            m++;
        return (uint16_t)(sign | m);  /* m == 0x400 is the smallest normal: still right */
    }
    /* normal: rebias the exponent, round the 13 dropped mantissa bits */
    const uint32_t r = a + 0x0fffu + ((a >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

/* bc_f32_to_half, but a NaN keeps its sign and its payload's top 10 bits (a zero
 * top making 1: still a NaN), as NumPy's astype(float16) does: GGUF F16 writing
 * (bc_ggml_from_f32) gives NumPy's very bits. */
static inline uint16_t bc_f32_to_half_numpy(float f)
{
    const uint32_t u = bc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        const uint32_t top = (u & 0x007fffffu) >> 13;
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7c00u | (top ? top : 1u));
    }
    return bc_f32_to_half(f);
}

/* IEEE half bits -> float, exactly. */
static inline float bc_half_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31)
        return bc_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e)
        return bc_bits_f32(sign | ((e + 112) << 23) | (m << 13));
    return bc_bits_f32(sign | bc_f32_bits((float)m * 5.9604644775390625e-8f));  /* m 2^-24 */
}

/* bfloat16 bits -> float, exactly. */
static inline float bc_bf16_to_f32(uint16_t h) { return bc_bits_f32((uint32_t)h << 16); }

#endif

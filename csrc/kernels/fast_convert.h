/* fast_convert.h: float32 -> the 2-byte values of GGUF's F16 and BF16 tensors
 * (writing files): F16C's / AVX-512's vcvtps2ph, rounding to nearest even by
 * its immediate (never MXCSR's mode), with NaNs given NumPy's bits in C; bfloat16
 * by integer rounding. Every element's bits are those of the scalar rule
 * (bc_half.h): the same on every instruction set. */
#include "bc_half.h"

/* the scalar rule of round16, one element */
static inline uint16_t round16_one(float x, int to_type)
{
    return to_type == BC_GGML_F16 ? bc_f32_to_half_numpy(x) : bc_f32_to_bf16(x);
}

static inline void round16_store(unsigned char *y, uint16_t h)
{
    y[0] = (unsigned char)(h & 0xffu);
    y[1] = (unsigned char)(h >> 8);
}

/* y (2 n bytes, little-endian), x (n) */
static void round16(unsigned char *y, const float *x, size_t n, int to_type)
{
    size_t i = 0;
#if BC_SIMD == 512
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    if (to_type == BC_GGML_F16) {
        for (; i + 16 <= n; i += 16) {
            const __m512 v = _mm512_loadu_ps(x + i);
            const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm256_storeu_si256((__m256i *)(y + 2 * i), h);
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(
                _mm512_and_si512(_mm512_castps_si512(v), absm), inf);
            for (unsigned m = nan; m; m &= m - 1) {  /* NaNs: NumPy's bits (rare) */
                const size_t k = i + (size_t)__builtin_ctz(m);
                round16_store(y + 2 * k, bc_f32_to_half_numpy(x[k]));
            }
        }
    } else {
        const __m512i lsb = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff),
                      quiet = _mm512_set1_epi32(0x40);
        for (; i + 16 <= n; i += 16) {
            const __m512i u = _mm512_loadu_si512((const void *)(x + i));
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absm), inf);
            const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), lsb);
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, bias), odd), 16);
            r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet));
            _mm256_storeu_si256((__m256i *)(y + 2 * i), _mm512_cvtepi32_epi16(r));
        }
    }
#elif BC_SIMD == 256
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    if (to_type == BC_GGML_F16) {
        for (; i + 8 <= n; i += 8) {
            const __m256 v = _mm256_loadu_ps(x + i);
            _mm_storeu_si128((__m128i *)(y + 2 * i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            /* |x| > inf as int32 (both non-negative): a NaN */
            const __m256i nan = _mm256_cmpgt_epi32(
                _mm256_and_si256(_mm256_castps_si256(v), absm), inf);
            for (unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(nan)); m;
                 m &= m - 1) {
                const size_t k = i + (size_t)__builtin_ctz(m);
                round16_store(y + 2 * k, bc_f32_to_half_numpy(x[k]));
            }
        }
    } else {
        const __m256i lsb = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff),
                      quiet = _mm256_set1_epi32(0x40);
        for (; i + 8 <= n; i += 8) {
            const __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf);
            const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb);
            __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), odd), 16);
            r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet), nan);
            /* each value < 2^16: the unsigned saturating pack is exact */
            const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r),
                                               _mm256_extracti128_si256(r, 1));
            _mm_storeu_si128((__m128i *)(y + 2 * i), p);
        }
    }
#endif
    for (; i < n; i++)
        round16_store(y + 2 * i, round16_one(x[i], to_type));
}

/* fast_avx512.c: the fast kernels for AVX-512F and BW (chosen at run time; every
 * AVX-512 CPU since Skylake-SP has both: BW gives vpshufb its 512-bit form). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#endif
#define BC_SIMD 512
#define BC_KERNEL_TABLE bc_kernels_avx512
#define BC_KERNEL_NAME "avx512"
#include "fast_tmpl.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
typedef int bc_fast_avx512_unused;
#endif

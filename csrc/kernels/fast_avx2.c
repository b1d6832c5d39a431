/* fast_avx2.c: the fast kernels for AVX2 + FMA + F16C (chosen at run time). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#define BC_SIMD 256
#define BC_KERNEL_TABLE bc_kernels_avx2
#define BC_KERNEL_NAME "avx2"
#include "fast_tmpl.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
typedef int bc_fast_avx2_unused;  /* not x86-64: nothing to compile */
#endif

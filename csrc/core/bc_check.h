/* bc_check.h: INTERNAL helpers the public entry points use to validate sizes
 * and pointers before any work (not part of the public API). */
#ifndef BC_CHECK_H
#define BC_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include "bc_core.h"

/* *out = a * b, or BC_EOVERFLOW if the product exceeds BC_MAX_ELEMENTS. */
static inline int bc_mul(size_t *out, size_t a, size_t b)
{
    const size_t max = (size_t)BC_MAX_ELEMENTS;
    if (a > max || b > max || (a && b > max / a))
        return BC_EOVERFLOW;
    *out = a * b;
    return BC_OK;
}

/* *out = a + b, or BC_EOVERFLOW past BC_MAX_ELEMENTS. */
static inline int bc_add(size_t *out, size_t a, size_t b)
{
    const size_t max = (size_t)BC_MAX_ELEMENTS;
    if (a > max || b > max - a)
        return BC_EOVERFLOW;
    *out = a + b;
    return BC_OK;
}

/* Largest byte count of a parameter buffer (BC_MAX_ELEMENTS float32 values and
 * their rounding to whole panels fit far below it). */
#define BC_MAX_BYTES ((size_t)BC_MAX_ELEMENTS * 16)

/* *out = a + b for byte counts, or BC_EOVERFLOW past BC_MAX_BYTES. */
static inline int bc_add_bytes(size_t *out, size_t a, size_t b)
{
    const size_t max = BC_MAX_BYTES;
    if (a > max || b > max - a)
        return BC_EOVERFLOW;
    *out = a + b;
    return BC_OK;
}

/* *out = a * b for byte counts, or BC_EOVERFLOW past BC_MAX_BYTES. */
static inline int bc_mul_bytes(size_t *out, size_t a, size_t b)
{
    const size_t max = BC_MAX_BYTES;
    if (a > max || b > max || (a && b > max / a))
        return BC_EOVERFLOW;
    *out = a * b;
    return BC_OK;
}

/* *out = a * b for counts a, b >= 0 (parameter counts, not tensor sizes: no
 * BC_MAX_ELEMENTS cap), or BC_EOVERFLOW past INT64_MAX. */
static inline int bc_mul_i64(int64_t *out, int64_t a, int64_t b)
{
    if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a))
        return BC_EOVERFLOW;
    *out = a * b;
    return BC_OK;
}

/* *out = a + b for counts a, b >= 0, or BC_EOVERFLOW past INT64_MAX. */
static inline int bc_add_i64(int64_t *out, int64_t a, int64_t b)
{
    if (a < 0 || b < 0 || b > INT64_MAX - a)
        return BC_EOVERFLOW;
    *out = a + b;
    return BC_OK;
}

/* 1 if float ranges [a, a+na) and [b, b+nb) share any element. */
static inline int bc_overlap(const float *a, size_t na, const float *b, size_t nb)
{
    if (!a || !b || !na || !nb)
        return 0;
    const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    const uintptr_t ea = pa + na * sizeof(float), eb = pb + nb * sizeof(float);
    return pa < eb && pb < ea;
}

/* p, or p + 1 float when p is not aligned for a pointer or a size_t: where a
 * workspace region holds structs or size_t values (such a region is carved
 * with one float to spare). */
static inline void *bc_word_align(float *p)
{
    return p + ((uintptr_t)p % sizeof(void *) ? 1 : 0);
}

/* A norm epsilon must be a finite, non-negative number. */
static inline int bc_eps_ok(float eps)
{
    return isfinite(eps) && eps >= 0.0f;
}

#endif

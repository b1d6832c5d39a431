/* bc_core.h: status codes and the portable random number generators. */
#ifndef BC_CORE_H
#define BC_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes returned by every entry point. */
#define BC_OK 0
#define BC_ENULL 1        /* a required pointer is NULL */
#define BC_ESIZE 2        /* a size is zero where it may not be, or inconsistent */
#define BC_EOVERFLOW 3    /* a size product overflows, or exceeds BC_MAX_ELEMENTS */
#define BC_EHEADS 4       /* d_model is not divisible by n_heads */
#define BC_EOPTION 5      /* an option (norm, activation, generator...) is unknown */
#define BC_ENOMEM 6       /* the kernels' scratch could not be allocated */
#define BC_ERANGE 7       /* an index (token id) is out of range */
#define BC_ECONTEXT 8     /* a sequence is longer than the context or the cache */
#define BC_EWORKSPACE 9   /* a caller-provided workspace is too small */
#define BC_EALIAS 10      /* an output overlaps an input it may not overlap */
#define BC_EVALUE 11      /* a value cannot be represented (a weight too large or not finite to quantise) */
#define BC_EEVICTED 12    /* a ring cache no longer holds a position the call would read */

/* Largest element count of any one tensor the library accepts (2^40). */
#define BC_MAX_ELEMENTS 1099511627776

/* A short, static description of a status code ("unknown status" if unknown). */
const char *bc_strerror(int status);

/* Random number generators: the C runtime rand() of two platforms, carried
 * portably so the book's figures come out the same everywhere.
 *   BC_RAND_MSVC:  state = state * 214013 + 2531011 (mod 2^32),
 *                  rand() = (state >> 16) & 0x7fff, RAND_MAX 32767.
 *   BC_RAND_GLIBC: the TYPE_3 additive feedback generator behind glibc's
 *                  rand(), RAND_MAX 2^31 - 1. */
#define BC_RAND_MSVC 0
#define BC_RAND_GLIBC 1

typedef struct {
    int kind;          /* BC_RAND_MSVC or BC_RAND_GLIBC */
    uint32_t lcg;      /* msvc state */
    uint32_t tab[31];  /* glibc state table */
    int front, rear;   /* glibc table cursors */
} bc_rng;

/* srand(seed) for the chosen generator. */
int bc_rng_init(bc_rng *g, int kind, uint32_t seed);

/* RAND_MAX of the generator. */
int bc_rng_rand_max(uint32_t *out, const bc_rng *g);

/* out (n): the next n values of rand(). */
int bc_rng_rand(uint32_t *out, bc_rng *g, size_t n);

/* out (n): the listings' weight draw, (randf() * 2 - 1) * scale in float,
 * where randf() = (float)rand() / RAND_MAX. */
int bc_rng_uniform(float *out, bc_rng *g, size_t n, float scale);

#ifdef __cplusplus
}
#endif

#endif

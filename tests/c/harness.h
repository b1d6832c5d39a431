/* harness.h: a tiny check harness for the C-level driver.
 *
 * Every public entry point is called directly, with good and with hostile
 * arguments. On an error the documented status must come back and nothing may
 * be written: outputs are canary-filled buffers from h_alloc(), checked with
 * h_untouched(). Every buffer also carries a guard zone past its end, checked
 * on success with h_guard_ok(), so an overrun shows even without a sanitizer.
 */
#ifndef BC_HARNESS_H
#define BC_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "blockc.h"

/* "negative" sizes as a caller casting -1 would pass them, and products that wrap */
#define H_NEG ((size_t)-1)
#define H_HALF (((size_t)-1) / 2 + 1) /* 2^63: H_HALF * 2 wraps to 0 */

void h_check(int ok, const char *what, const char *file, int line);
void h_status(int got, int want, const char *call, const char *file, int line);

/* EXPECT_STATUS(BC_ESIZE, bc_something(...)): the call returns exactly that code */
#define EXPECT_STATUS(want, call) h_status((call), (want), #call, __FILE__, __LINE__)
#define EXPECT(cond) h_check((cond) != 0, #cond, __FILE__, __LINE__)

/* n floats (at least 1), canary-filled, followed by a canary guard zone.
 * Freed by h_free_all(). */
float *h_alloc(size_t n);
/* The same for n bytes of any type. */
void *h_alloc_bytes(size_t n);
/* The first n floats (n bytes) still hold the canary. */
int h_untouched(const void *p, size_t nbytes);
/* The guard zone after the buffer is intact (nbytes as allocated). */
int h_guard_ok(const void *p, size_t nbytes);
/* Refill with the canary. */
void h_refill(void *p, size_t nbytes);
/* Fill n floats with a deterministic pattern in [-scale, scale]. */
void h_fill(float *p, size_t n, uint32_t seed, float scale);
/* All n floats finite. */
int h_finite(const float *p, size_t n);
void h_free_all(void);

/* Small models: GPT-2's architecture at these sizes; a Llama-shaped one (RMSNorm,
 * RoPE, SwiGLU, 4 heads, 2 K/V heads of 6, F = 21, no biases; V=13, C=9, D=16, L=2). */
bc_gpt_config h_gpt2_config(size_t vocab, size_t context, size_t width, size_t heads,
                            size_t layers, int tied);
bc_gpt_config h_llama_config(int tied);

/* A parameter buffer (bc_gpt_param_bytes) for c: every tensor h_fill'ed with seed + its
 * index at scale (a router's at router_scale, 0: all zeros), gains near 1, each matrix
 * packed in its format. */
unsigned char *h_gpt_params(const bc_gpt_config *c, uint32_t seed, float scale,
                            float router_scale);

/* the sections, one per part header */
void test_core(void);
void test_engine(void);
void test_pack(void);
void test_book(void);
void test_gpt(void);
void test_runtime(void);
void test_train(void);
void test_window(void);
void test_moe(void);

#endif

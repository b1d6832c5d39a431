/* harness.c: counting, canary buffers and the driver's main(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define CANARY 0xA5u
#define GUARD 64 /* bytes of guard zone after each buffer */
#define MAX_BUFS 65536 /* every buffer is kept (and its guard checked) until exit */

static int n_pass, n_fail;
static void *bufs[MAX_BUFS];
static size_t n_bufs;

void h_check(int ok, const char *what, const char *file, int line)
{
    if (ok) {
        n_pass++;
    } else {
        n_fail++;
        fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what);
    }
}

void h_status(int got, int want, const char *call, const char *file, int line)
{
    if (got == want) {
        n_pass++;
    } else {
        n_fail++;
        fprintf(stderr, "%s:%d: FAILED: %s returned %d (%s), want %d (%s)\n", file, line,
                call, got, bc_strerror(got), want, bc_strerror(want));
    }
}

void *h_alloc_bytes(size_t n)
{
    if (n_bufs == MAX_BUFS) {
        fprintf(stderr, "harness: too many buffers\n");
        exit(2);
    }
    unsigned char *p = malloc((n ? n : 1) + GUARD);
    if (!p) {
        fprintf(stderr, "harness: out of memory\n");
        exit(2);
    }
    memset(p, CANARY, (n ? n : 1) + GUARD);
    bufs[n_bufs++] = p;
    return p;
}

float *h_alloc(size_t n) { return h_alloc_bytes(n * sizeof(float)); }

int h_untouched(const void *p, size_t nbytes)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < nbytes; i++)
        if (c[i] != CANARY)
            return 0;
    return 1;
}

int h_guard_ok(const void *p, size_t nbytes)
{
    return h_untouched((const unsigned char *)p + (nbytes ? nbytes : 1), GUARD);
}

void h_refill(void *p, size_t nbytes) { memset(p, CANARY, nbytes); }

void h_fill(float *p, size_t n, uint32_t seed, float scale)
{
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
}

int h_finite(const float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i]))
            return 0;
    return 1;
}

void h_free_all(void)
{
    for (size_t i = 0; i < n_bufs; i++)
        free(bufs[i]);
    n_bufs = 0;
}

int main(void)
{
    test_core();
    test_engine();
    test_pack();
    test_book();
    test_gpt();
    test_runtime();
    test_train();
    test_window();
    test_moe();
    h_free_all();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}

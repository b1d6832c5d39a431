/* outbuf.c: memory for large outputs, kept between outputs (bc_runtime.h).
 *
 * A fresh output of many megabytes is all first writes: every 4 KiB page is a
 * fault, the kernel zeroing and mapping it (a 1024-token prompt's 201 MB of
 * logits: ~70 ms on one thread of an AMD Zen 5, a tenth of the prompt). A
 * block handed back is kept, mapped, for the next output it fits; a few
 * blocks and a bounded total at most, the oldest freed first.
 *
 * A block: a 64-byte header (its capacity) and then the caller's bytes, 64-byte
 * aligned. One mutex guards the kept list; the list is never touched outside
 * it, and a block is on the list or with one caller, never both. */
#if !defined(_WIN32)
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "bc_core.h"
#include "bc_rt.h"  /* bc_rt_alloc64 */

#if !defined(_WIN32)
#include <pthread.h>
#define OUT_KEEPS 1
static pthread_mutex_t g_out_mu = PTHREAD_MUTEX_INITIALIZER;
/* a child forked while another thread held the lock gets it free: the parent's
 * holder does not exist there */
static void out_lock_all(void) { pthread_mutex_lock(&g_out_mu); }
static void out_unlock_all(void) { pthread_mutex_unlock(&g_out_mu); }
static pthread_once_t g_out_once = PTHREAD_ONCE_INIT;
static void out_fork_init(void) { (void)pthread_atfork(out_lock_all, out_unlock_all, out_unlock_all); }
#define OUT_LOCK() (pthread_once(&g_out_once, out_fork_init), pthread_mutex_lock(&g_out_mu))
#define OUT_UNLOCK() pthread_mutex_unlock(&g_out_mu)
#else
#define OUT_KEEPS 0 /* no lock here: every block is freed when handed back */
#define OUT_LOCK() ((void)0)
#define OUT_UNLOCK() ((void)0)
#endif

#define OUT_HEAD ((size_t)64)

static unsigned char *g_kept[BC_OUT_KEEP];  /* oldest first */
static size_t g_nkept = 0, g_kept_bytes = 0;
static int g_out_on = -1;  /* -1: BLOCKC_OUTPUT_POOL not read yet */

static size_t cap_of(const unsigned char *blk)
{
    size_t c;
    memcpy(&c, blk, sizeof c);
    return c;
}

static unsigned char *blk_new(size_t bytes)
{
    unsigned char *p = bc_rt_alloc64(OUT_HEAD + bytes);
    if (p)
        memcpy(p, &bytes, sizeof bytes);
    return p;
}

/* keeping is on unless BLOCKC_OUTPUT_POOL=0 (read once; under the lock) */
static int out_on(void)
{
    if (g_out_on < 0) {
        const char *s = getenv("BLOCKC_OUTPUT_POOL");
        g_out_on = OUT_KEEPS && !(s && s[0] == '0' && s[1] == '\0');
    }
    return g_out_on;
}

/* The kept block i taken off the list (under the lock). */
static unsigned char *unkeep(size_t i)
{
    unsigned char *blk = g_kept[i];
    g_kept_bytes -= cap_of(blk);
    memmove(g_kept + i, g_kept + i + 1, (g_nkept - i - 1) * sizeof *g_kept);
    g_kept[--g_nkept] = NULL;
    return blk;
}

int bc_out_take(void **p, size_t bytes)
{
    if (!p)
        return BC_ENULL;
    *p = NULL;
    if (bytes == 0 || bytes > SIZE_MAX - OUT_HEAD)
        return BC_ESIZE;
    unsigned char *blk = NULL;
    OUT_LOCK();
    /* the smallest kept block that holds bytes without wasting half of itself */
    size_t best = g_nkept;
    for (size_t i = 0; i < g_nkept; i++) {
        const size_t c = cap_of(g_kept[i]);
        if (c >= bytes && c / 2 <= bytes && (best == g_nkept || c < cap_of(g_kept[best])))
            best = i;
    }
    if (best < g_nkept)
        blk = unkeep(best);
    OUT_UNLOCK();
    if (!blk) {
        blk = blk_new(bytes);
        if (!blk)
            return BC_ENOMEM;
        (void)bc_advise_small_pages(blk + OUT_HEAD, bytes);
    }
    *p = blk + OUT_HEAD;
    return BC_OK;
}

int bc_out_give(void *p)
{
    if (!p)
        return BC_OK;
    unsigned char *blk = (unsigned char *)p - OUT_HEAD;
    const size_t c = cap_of(blk);
    unsigned char *drop[BC_OUT_KEEP + 1];
    size_t nd = 0;
    OUT_LOCK();
    if (!out_on() || c > BC_OUT_KEEP_BYTES) {
        drop[nd++] = blk;
    } else {
        while (g_nkept == BC_OUT_KEEP || g_kept_bytes + c > BC_OUT_KEEP_BYTES)
            drop[nd++] = unkeep(0);
        g_kept[g_nkept++] = blk;
        g_kept_bytes += c;
    }
    OUT_UNLOCK();
    for (size_t i = 0; i < nd; i++)  /* freed outside the lock: munmap can be slow */
        bc_rt_free64(drop[i]);
    return BC_OK;
}

int bc_out_kept(size_t *blocks, size_t *bytes)
{
    if (!blocks || !bytes)
        return BC_ENULL;
    OUT_LOCK();
    *blocks = g_nkept;
    *bytes = g_kept_bytes;
    OUT_UNLOCK();
    return BC_OK;
}

int bc_out_release(void)
{
    unsigned char *drop[BC_OUT_KEEP];
    size_t nd = 0;
    OUT_LOCK();
    while (g_nkept)
        drop[nd++] = unkeep(0);
    OUT_UNLOCK();
    for (size_t i = 0; i < nd; i++)
        bc_rt_free64(drop[i]);
    return BC_OK;
}

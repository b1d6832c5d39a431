/* prefetch.c: whether integer decoding prefetches its weights in software,
 * per group of formats, chosen by timing (bc_runtime.h's BC_PREFETCH_*).
 *
 * The decoders of the integer formats (fast_intdot_part.h's int_block) can
 * prefetch each block's bytes INT_AHEAD (8 KiB) on. Whether that helps is the
 * CPU's business: on an AMD Zen 4 (family 25 model 17) the super-blocks read
 * forward (q4_ki, q5_ki, q6_ki, iq4_xsi) streamed 1.3-1.6x faster from memory
 * without it, the small blocks (q8_0i, q4_0i, ...) faster with it; on an AMD
 * Zen 5 q4_ki was 1.6x faster with it. The compiled split (fast_intdot.h's
 * fk_prefetches) is Zen 4's; auto mode keeps it unless a probe on this CPU
 * says otherwise, group by group:
 *
 *   one row of x times PF_NMAT matrices of PF_OC x PF_C weights of the
 *   group's representative format (PF_BYTES in all, their bytes a fixed
 *   pattern: the arithmetic does not depend on the values), every matrix
 *   evicted from the caches first (bc_rt_evict: a model's weights come from
 *   memory, and a server's L3 would hold the whole probe), on the calling
 *   thread, thread CPU time; one untimed pass of each mode, then PF_ROUNDS
 *   rounds of both modes in alternating order; the least time of each.
 *   The other mode is chosen only when it is PF_MARGIN faster than the
 *   default: within it, noise decides nothing and the default stays.
 *
 * Prefetching changes no bit of any result: a wrong choice costs time only.
 * Forcing (BLOCKC_PREFETCH, bc_set_prefetch) replaces every group's choice.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bc_core.h"
#include "bc_atomic.h"
#include "bc_dispatch.h"
#include "bc_rt.h"

#if !defined(_WIN32) && !defined(BC_NO_THREADS)
#include <pthread.h>
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&g_mu)
#define UNLOCK() pthread_mutex_unlock(&g_mu)
#else
#define LOCK() ((void)0)
#define UNLOCK() ((void)0)
#endif

/* ---- state (guarded by g_mu; g_on and g_mode read without it) ------------ */

static int g_mode = -1;                        /* BC_PREFETCH_*, -1: not read yet */
static int g_on[BC_NPF_GROUPS] = {-1, -1};     /* 1 on, 0 off, -1: not chosen yet */
_Static_assert(BC_NPF_GROUPS == 2, "g_on: one -1 per group");
static int g_how[BC_NPF_GROUPS];
static double g_sec[BC_NPF_GROUPS][2];         /* [group][on]: the probe's least time */
static double g_handicap[BC_NPF_GROUPS][2];

/* The group of a BC_DTYPE_*, or -1 (no software prefetch to choose). */
static int group_of(int dtype)
{
    switch (dtype) {
    case BC_DTYPE_Q4_KI: case BC_DTYPE_Q5_KI: case BC_DTYPE_Q6_KI: case BC_DTYPE_IQ4_XSI:
        return BC_PF_GROUP_FORWARD;
    case BC_DTYPE_Q8_0I: case BC_DTYPE_Q4_0I: case BC_DTYPE_Q5_0I: case BC_DTYPE_IQ4_NLI:
    case BC_DTYPE_Q4_1I: case BC_DTYPE_Q5_1I: case BC_DTYPE_Q2_KI: case BC_DTYPE_Q3_KI:
        return BC_PF_GROUP_BLOCKS;
    default:
        return -1;
    }
}

/* The compiled default of a group (fast_intdot.h's fk_prefetches). */
static int default_on(int group)
{
    return group == BC_PF_GROUP_BLOCKS;
}

/* The format a group's probe times. */
static int representative(int group)
{
    return group == BC_PF_GROUP_FORWARD ? BC_DTYPE_Q4_KI : BC_DTYPE_Q4_0I;
}

/* BLOCKC_PREFETCH: auto (or unset, or anything else), default, on, off. */
static int mode_from_env(void)
{
    const char *s = getenv("BLOCKC_PREFETCH");
    if (s && !strcmp(s, "default"))
        return BC_PREFETCH_DEFAULT;
    if (s && !strcmp(s, "on"))
        return BC_PREFETCH_ON;
    if (s && !strcmp(s, "off"))
        return BC_PREFETCH_OFF;
    return BC_PREFETCH_AUTO;
}

static int mode_now(void)
{
    int m = BC_LOAD(&g_mode);
    if (m < 0) {
        BC_INIT_ONCE(&g_mode, mode_from_env());
        m = BC_LOAD(&g_mode);
    }
    return m;
}

/* ---- the probe ----------------------------------------------------------- */

#define PF_C 2048                       /* a matrix: PF_OC outputs of PF_C inputs */
#define PF_OC 2048
#define PF_BYTES ((size_t)24 << 20)     /* the matrices of a probe, at most */
#define PF_ROUNDS 3
#define PF_MARGIN 0.05

/* The table whose decoders a probe times: kt, unless it has no prefetch to
 * choose (the portable kernels): then the widest FMA one's; NULL when the
 * CPU (or build) has none. */
static const bc_kernel_table *probe_table(const bc_kernel_table *kt)
{
    const bc_kernel_table *generic = bc_rt_table_of(BC_ISA_GENERIC);
    if (kt && kt != generic)
        return kt;
    const int best = bc_rt_best_isa();
    return best >= BC_ISA_AVX2 ? bc_rt_table_of(best) : NULL;
}

/* One pass of the group's probe: every matrix's product with prefetch `on`. */
static void probe_pass(const bc_kernel_table *kt, int dtype, const unsigned char *w, size_t mbytes,
                       size_t nmat, float *y, const float *x, const unsigned char *xq, int on)
{
    const int wf = BC_WF_PANEL(dtype);
    for (size_t k = 0; k < nmat; k++) {
        const bc_gemm g = {y, x, w + k * mbytes, NULL, NULL, 1, PF_C, PF_OC, wf, BC_ACT_NONE,
                           on ? BC_GEMM_PF_ON : BC_GEMM_PF_OFF, NULL};
        kt->wf[wf].xq_part(&g, xq, 0, 1, 0, PF_OC);
    }
}

/* Time group grp's probe on kt's decoders (w: PF_BYTES of weights; x, y: a
 * row of PF_C inputs, PF_OC outputs; xq: room for x rounded), and choose. */
static void time_group(const bc_kernel_table *kt, int grp, const unsigned char *w, float *y,
                       const float *x, unsigned char *xq)
{
    const int dtype = representative(grp), wf = BC_WF_PANEL(dtype);
    const size_t mbytes = bc_format_panel_bytes(bc_format_of(dtype), PF_C)
                          * ((PF_OC + BC_PANEL - 1) / BC_PANEL);
    const size_t nmat = PF_BYTES / mbytes;
    kt->wf[wf].xq_rows(xq, x, 1, PF_C);
    double best[2] = {INFINITY, INFINITY};
    for (int on = 0; on < 2; on++)  /* untimed: the code and the pages warm */
        probe_pass(kt, dtype, w, mbytes, nmat, y, x, xq, on);
    for (int r = 0; r < PF_ROUNDS; r++)
        for (int k = 0; k < 2; k++) {
            const int on = r % 2 ? 1 - k : k;  /* the order alternates */
            bc_rt_evict(w, nmat * mbytes);
            const double t0 = bc_rt_cpu_seconds();
            probe_pass(kt, dtype, w, mbytes, nmat, y, x, xq, on);
            const double h = g_handicap[grp][on];
            if (h > 0.0)
                while (bc_rt_cpu_seconds() - t0 < h)  /* a test's deliberately slow mode */
                    ;
            const double t = bc_rt_cpu_seconds() - t0;
            if (t < best[on])
                best[on] = t;
        }
    const int def = default_on(grp), other = !def;
    g_sec[grp][0] = best[0];
    g_sec[grp][1] = best[1];
    BC_STORE(&g_on[grp], best[other] < best[def] * (1.0 - PF_MARGIN) ? other : def);
    g_how[grp] = BC_CHOSEN_TIMED;
}

/* Time the groups with todo[g] set on kt's decoders, and choose (under g_mu).
 * BC_ENOMEM (nothing chosen) when the probe's memory cannot be had. */
static int measure(const bc_kernel_table *kt, const int todo[BC_NPF_GROUPS])
{
    kt = probe_table(kt);
    if (!kt) {  /* nothing to choose: the defaults */
        for (int grp = 0; grp < BC_NPF_GROUPS; grp++)
            if (todo[grp]) {
                BC_STORE(&g_on[grp], default_on(grp));
                g_how[grp] = BC_CHOSEN_WIDEST;
            }
        return BC_OK;
    }
    unsigned char *w = bc_rt_alloc64(PF_BYTES);
    float *x = malloc(PF_C * sizeof(float)), *y = malloc(PF_OC * sizeof(float));
    unsigned char *xq = malloc(bc_xq_row_bytes(BC_DTYPE_Q6_KI, PF_C));  /* the widest rows */
    const int st = w && x && y && xq ? BC_OK : BC_ENOMEM;
    if (st == BC_OK) {
        /* every half of the pattern is finite and normal (1.03, -112.6): any
         * reading of it as scales and quants decodes */
        const uint32_t word = 0x3c23d70au;
        for (size_t i = 0; i + 4 <= PF_BYTES; i += 4)
            memcpy(w + i, &word, 4);
        for (size_t i = 0; i < PF_C; i++)
            x[i] = 0.5f - (float)(i % 7) * 0.125f;
        for (int grp = 0; grp < BC_NPF_GROUPS; grp++)
            if (todo[grp])
                time_group(kt, grp, w, y, x, xq);
    }
    bc_rt_free64(w);
    free(x);
    free(y);
    free(xq);
    return st;
}

/* Choose the groups not chosen yet (under g_mu); without memory for the
 * probe, their defaults. */
static void choose_missing(const bc_kernel_table *kt)
{
    int todo[BC_NPF_GROUPS], any = 0;
    for (int grp = 0; grp < BC_NPF_GROUPS; grp++)
        any |= todo[grp] = g_on[grp] < 0;
    if (any && measure(kt, todo) != BC_OK)
        for (int grp = 0; grp < BC_NPF_GROUPS; grp++)
            if (g_on[grp] < 0) {
                BC_STORE(&g_on[grp], default_on(grp));
                g_how[grp] = BC_CHOSEN_WIDEST;
            }
}

/* The table this process runs now (forced or auto). */
static const bc_kernel_table *current_table(void)
{
    const int isa = bc_rt_forced_isa();
    return isa >= 0 ? bc_rt_table_of(isa) : bc_rt_auto_table();
}

int bc_rt_prefetch(const bc_kernel_table *kt, int dtype)
{
    const int grp = group_of(dtype);
    if (grp < 0)
        return BC_GEMM_PF_DEFAULT;
    switch (mode_now()) {
    case BC_PREFETCH_DEFAULT: return BC_GEMM_PF_DEFAULT;
    case BC_PREFETCH_ON: return BC_GEMM_PF_ON;
    case BC_PREFETCH_OFF: return BC_GEMM_PF_OFF;
    default: break;
    }
    int on = BC_LOAD(&g_on[grp]);
    if (on < 0) {
        LOCK();
        choose_missing(kt);
        on = g_on[grp];
        UNLOCK();
    }
    return on ? BC_GEMM_PF_ON : BC_GEMM_PF_OFF;
}

/* ---- the entry points ---------------------------------------------------- */

int bc_set_prefetch(int mode)
{
    mode_now();  /* the environment read first: a later read cannot undo this */
    if (mode < BC_PREFETCH_AUTO || mode > BC_PREFETCH_OFF)
        return BC_EOPTION;
    BC_STORE(&g_mode, mode);
    return BC_OK;
}

int bc_get_prefetch(int *mode)
{
    if (!mode)
        return BC_ENULL;
    *mode = mode_now();
    return BC_OK;
}

int bc_prefetch_choice(int *on, int *how, double *seconds, int group, size_t n_seconds)
{
    if (!on || !how)
        return BC_ENULL;
    if (group < 0 || group >= BC_NPF_GROUPS)
        return BC_EOPTION;
    if (seconds && n_seconds < 2)
        return BC_ESIZE;
    const int mode = mode_now();
    const bc_kernel_table *kt = mode == BC_PREFETCH_AUTO ? current_table() : NULL;
    LOCK();
    if (mode == BC_PREFETCH_AUTO)
        choose_missing(kt);
    const int o = mode == BC_PREFETCH_ON ? 1 : mode == BC_PREFETCH_OFF ? 0
                : mode == BC_PREFETCH_DEFAULT ? default_on(group) : g_on[group];
    const int h = mode == BC_PREFETCH_AUTO ? g_how[group] : BC_CHOSEN_FORCED;
    double s[2];
    memcpy(s, g_sec[group], sizeof s);
    UNLOCK();
    *on = o;
    *how = h;
    if (seconds)
        memcpy(seconds, s, sizeof s);
    return BC_OK;
}

int bc_set_prefetch_choice(int group, int on)
{
    if (group < 0 || group >= BC_NPF_GROUPS || (on != 0 && on != 1))
        return BC_EOPTION;
    LOCK();
    BC_STORE(&g_on[group], on);
    g_how[group] = BC_CHOSEN_GIVEN;
    UNLOCK();
    return BC_OK;
}

int bc_tune_prefetch(void)
{
    const int todo[BC_NPF_GROUPS] = {1, 1};
    const bc_kernel_table *kt = current_table();
    LOCK();
    const int st = measure(kt, todo);
    UNLOCK();
    return st;
}

int bc_prefetch_handicap(int group, int on, double seconds)
{
    if (group < 0 || group >= BC_NPF_GROUPS || (on != 0 && on != 1)
        || !(seconds >= 0.0 && seconds <= 1.0))
        return BC_EOPTION;
    LOCK();
    g_handicap[group][on] = seconds;
    UNLOCK();
    return BC_OK;
}

/* tune.c: each kernel family's variant chosen by timing (auto mode).
 *
 * Unless an instruction set is forced (BLOCKC_ISA, bc_set_isa), every kernel
 * family (BC_FAMILY_*, bc_runtime.h) runs the variant that measured fastest
 * on this CPU: at the first kernel call the families not chosen yet (none
 * installed with bc_set_kernel_choice, e.g. from a cache) are probed, each
 * candidate on a small problem of the family's kind, a few rounds in turn on
 * the calling thread, the least thread CPU time of each kept (a neighbour
 * that takes the core away costs wall time, not CPU time); 0.1-0.2 s in all
 * (the decoders stream 34 MiB of probe weights, each matrix evicted from the
 * caches first). The kernels a call runs are then one table assembled from
 * the chosen variants' tables (auto_table).
 *
 * The candidates are the instruction sets with FMA (AVX2, AVX-512): on packed
 * weights their GEMM tile and their decoding rows compute every element by
 * the same chain of FMAs, and their attention and elementwise kernels the
 * same operations (exp's 2^n scaling rounds once in both), so any mix gives
 * the bits of either: a KV-cache step still equals the full pass, a row's
 * result does not depend on the other rows, the thread count changes
 * nothing. The portable kernels (no FMA) are never mixed in: they run only
 * when forced or when the CPU has nothing else.
 *
 * Why measure: the widest instruction set is not the fastest everywhere. A
 * CPU that executes AVX-512 as two 256-bit halves (AMD Zen 4) runs some
 * AVX-512 kernels slower than the AVX2 ones; the conversion-bound decoders
 * (bfloat16, q8_0) differ from the memory-bound ones. A wrong guess here costs
 * nothing: the probe times what runs.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>  /* _mm_clflush, _mm_mfence: SSE2, every x86-64 */
#endif

#include "bc_core.h"
#include "bc_dispatch.h"  /* the kernel tables, BC_ACT_NONE */
#include "bc_rt.h"

#if !defined(_WIN32) && !defined(BC_NO_THREADS)
#include <pthread.h>
#define HAVE_MUTEX 1
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&g_mu)
#define UNLOCK() pthread_mutex_unlock(&g_mu)
#else
#define LOCK() ((void)0)
#define UNLOCK() ((void)0)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LOADP(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STOREP(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#else
#define LOADP(p) (*(p))
#define STOREP(p, v) (*(p) = (v))
#endif

/* ---- state (guarded by g_mu; g_auto published for the fast path) -------- */

static int g_choice[BC_NFAMILIES] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};  /* -1: not chosen yet */
_Static_assert(BC_NFAMILIES == 10, "g_choice: one -1 per family");
static int g_how[BC_NFAMILIES];
static double g_sec[BC_NFAMILIES][BC_NISAS];
static double g_handicap[BC_NFAMILIES][BC_NISAS];

/* Assembled tables, one per choice vector ever used, kept for the process's
 * life (a call may still hold an older one; at most 2^8 vectors of two
 * candidates). */
typedef struct mix {
    int isa[BC_NFAMILIES];
    bc_kernel_table t;
    struct mix *next;
} mix;
static mix *g_mixes;
static const bc_kernel_table *g_auto;  /* the current choices' table, NULL: choose first */

/* The weight layout (BC_WF_*) of a decoding family. */
static int family_wf(int f)
{
    switch (f) {
    case BC_FAMILY_DECODE_F32: return BC_WF_PANEL(BC_DTYPE_F32);
    case BC_FAMILY_DECODE_BF16: return BC_WF_PANEL(BC_DTYPE_BF16);
    case BC_FAMILY_DECODE_Q8_0: return BC_WF_PANEL(BC_DTYPE_Q8_0);
    default: return BC_WF_ROWS;
    }
}

/* The candidates on this CPU: the FMA instruction sets it runs, widest first. */
static int candidates(int out[BC_NISAS])
{
    const int best = bc_rt_best_isa();
    int n = 0;
    for (int isa = best; isa >= BC_ISA_AVX2; isa--)
        out[n++] = isa;
    if (n == 0)
        out[n++] = BC_ISA_GENERIC;
    return n;
}

static int is_candidate(int isa)
{
    int c[BC_NISAS];
    const int n = candidates(c);
    for (int i = 0; i < n; i++)
        if (c[i] == isa)
            return 1;
    return 0;
}

/* t's fields of family f <- src's. A weight format without a family of its
 * own decodes with the GEMM family's variant (the table starts as its copy). */
static void take(bc_kernel_table *t, const bc_kernel_table *src, int f)
{
    switch (f) {
    case BC_FAMILY_GEMM:
        t->gemm_mr = src->gemm_mr;
        t->gemm_nr = src->gemm_nr;
        t->gemm_part = src->gemm_part;
        for (int wf = 0; wf < BC_NWF; wf++)  /* the GEMM's copies of each layout's blocks */
            t->wf[wf].panels = src->wf[wf].panels;
        t->mm_part = src->mm_part;  /* shares the tile and its MR */
        break;
    case BC_FAMILY_DECODE_F32: case BC_FAMILY_DECODE_BF16: case BC_FAMILY_DECODE_Q8_0:
    case BC_FAMILY_DECODE_ROWS: {
        const int wf = family_wf(f);
        t->wf[wf].rows_part = src->wf[wf].rows_part;
        if (f == BC_FAMILY_DECODE_BF16)  /* float16's decoder: the same reads, another conversion */
            t->wf[BC_WF_PANEL(BC_DTYPE_F16)].rows_part =
                src->wf[BC_WF_PANEL(BC_DTYPE_F16)].rows_part;
        break;
    }
    case BC_FAMILY_DECODE_Q8_0I: case BC_FAMILY_DECODE_BF16I: {
        /* their formats' decoding, prompts and rounding of x (the family's probe
         * times a prompt's product too); the integer formats share one tile
         * source, other blocks */
        static const int integer[] = {BC_DTYPE_Q8_0I, BC_DTYPE_Q4_0I, BC_DTYPE_Q5_0I,
                                      BC_DTYPE_Q4_KI, BC_DTYPE_Q6_KI, BC_DTYPE_Q5_KI,
                                      BC_DTYPE_IQ4_NLI, BC_DTYPE_IQ4_XSI,
                                      BC_DTYPE_Q4_1I, BC_DTYPE_Q5_1I, BC_DTYPE_Q2_KI, BC_DTYPE_Q3_KI};
        static const int bf16[] = {BC_DTYPE_BF16I};
        const int bf = f == BC_FAMILY_DECODE_BF16I;
        const int *dts = bf ? bf16 : integer;
        const size_t n = bf ? 1 : sizeof integer / sizeof integer[0];
        for (size_t k = 0; k < n; k++) {
            const int wf = BC_WF_PANEL(dts[k]);
            if (dts[k] != BC_DTYPE_Q4_KI)  /* q4_ki's decoding: a family of its own */
                t->wf[wf].xq_part = src->wf[wf].xq_part;
            t->wf[wf].xq_gemm = src->wf[wf].xq_gemm;
            t->wf[wf].xq_rows = src->wf[wf].xq_rows;
        }
        break;
    }
    case BC_FAMILY_DECODE_Q4_KI: {
        /* q4_ki's decoding alone (its x rounded as every variant rounds it: the
         * bytes of bc_xq_row_bytes are the format's, not the instruction set's).
         * On an AMD Zen 4 its AVX2 decoder streams a model from memory 1.5x
         * as fast as its AVX-512 one on one thread, 1.3x on two, where q5_ki's,
         * q6_ki's and iq4_xsi's are faster on AVX-512 (benches/ab_products.py,
         * issue 51) */
        const int wf = BC_WF_PANEL(BC_DTYPE_Q4_KI);
        t->wf[wf].xq_part = src->wf[wf].xq_part;
        break;
    }
    case BC_FAMILY_ATTENTION:
        t->attn_bq = src->attn_bq;
        t->attn_scratch = src->attn_scratch;
        t->attn_unit = src->attn_unit;
        t->attn_decode = src->attn_decode;
        t->attn_bwd_scratch = src->attn_bwd_scratch;
        t->attn_bwd_kv = src->attn_bwd_kv;
        t->attn_bwd_q = src->attn_bwd_q;
        break;
    default:  /* BC_FAMILY_ELEMENTWISE */
        t->act = src->act;
        t->swiglu = src->swiglu;
        t->add = src->add;
        t->act_bwd = src->act_bwd;
        t->swiglu_bwd = src->swiglu_bwd;
        t->xent_row = src->xent_row;
        t->adamw = src->adamw;
        t->round16 = src->round16;
        break;
    }
}

/* The table of the current choices (every family chosen); NULL without memory. */
static const bc_kernel_table *assemble(void)
{
    for (mix *m = g_mixes; m; m = m->next)
        if (!memcmp(m->isa, g_choice, sizeof g_choice))
            return &m->t;
    mix *m = malloc(sizeof *m);
    if (!m)
        return NULL;
    memcpy(m->isa, g_choice, sizeof g_choice);
    m->t = *bc_rt_table_of(g_choice[BC_FAMILY_GEMM]);
    m->t.name = "auto";
    for (int f = 0; f < BC_NFAMILIES; f++)
        take(&m->t, bc_rt_table_of(g_choice[f]), f);
    m->next = g_mixes;
    g_mixes = m;
    return &m->t;
}

/* ---- the probes ---------------------------------------------------------- */

static double cpu_now(void)
{
    struct timespec ts;
#if defined(CLOCK_THREAD_CPUTIME_ID)
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Probe sizes. Decoding streams a 4 MiB matrix, each call the next of
 * P_NREG (34 MiB in all), evicted from the caches before it is timed
 * (probe_evict): a model's weights come from memory, and where they come from
 * decides. On an Intel Xeon (Emerald Rapids, KVM) the AVX2 bfloat16 decoder
 * was 7% faster than AVX-512's on one warm 4 MiB matrix, and 7-25% slower on
 * matrices from beyond L2; on a later one (family 6 model 167) 18% slower
 * from its L3 and 7-10% faster from memory. q8_0 streams two shapes (its
 * case below). A prompt multiplies 64 rows by 256 x 256. */
#define P_DC 1024                 /* decode f32: c x oc = 1024 x 1024 */
#define P_GN 64
#define P_GC 256
#define P_TK 512                  /* attention: keys */
#define P_DH 64
#define P_NH 4                    /* query heads on one K/V head */
#define P_TQ 32                   /* a prompt's query tile */
#define P_EW 32768                /* elementwise floats */
#define P_QN 576                  /* q8_0's narrow matrix: 576 x 3584, then 2048 x 1024 */
#define P_QNO 3584

typedef struct {
    unsigned char *w;   /* weights: P_NREG regions of P_WBYTES, every 4-byte word 0x3c23d70a */
    size_t next;        /* the region the next decoding probe streams */
    float *x, *y, *r;   /* inputs and outputs, P_XF floats each */
    float *scratch;     /* the largest any candidate asks for */
} probe_mem;

/* q8_0 2048 x 2048: 128 panels of 64 blocks */
#define P_WBYTES ((size_t)(2048 / BC_PANEL) * (2048 / 32) * sizeof(bc_q8_block))
#define P_NREG 8
_Static_assert((P_QN / 32) * (P_QNO / BC_PANEL) + (2048 / 32) * (1024 / BC_PANEL) <=
                   (2048 / 32) * (2048 / BC_PANEL),
               "q8_0's two probe matrices fit one region");
_Static_assert((size_t)2048 * (2048 / 256) * 160 <= P_WBYTES,
               "q4_ki's probe matrix (144 bytes a 256-value block, with room) fits one region");
#define P_XF ((size_t)P_EW > 3 * (size_t)P_TK * P_DH ? (size_t)P_EW : 3 * (size_t)P_TK * P_DH)

static size_t probe_scratch(int nc, const int *c)
{
    size_t per = BC_GEMM_SCRATCH;
    for (int i = 0; i < nc; i++) {
        const bc_kernel_table *kt = bc_rt_table_of(c[i]);
        const size_t a = kt->attn_scratch(P_DH);
        if (a > per)
            per = a;
    }
    return per;
}

static void probe_free(probe_mem *p)
{
    free(p->w);
    free(p->x);
    free(p->y);
    free(p->r);
    free(p->scratch);
}

static int probe_alloc(probe_mem *p, int nc, const int *c)
{
    memset(p, 0, sizeof *p);
    p->w = malloc(P_NREG * P_WBYTES);
    p->x = malloc(P_XF * sizeof(float));
    p->y = malloc(P_XF * sizeof(float));
    p->r = malloc(P_XF * sizeof(float));
    p->scratch = malloc(probe_scratch(nc, c) * sizeof(float));
    if (!p->w || !p->x || !p->y || !p->r || !p->scratch) {
        probe_free(p);
        return BC_ENOMEM;
    }
    /* every reading of the bytes is finite and normal: float32 0.01, bfloat16
     * 0.00998 and -1.5e14, halves 1.03 and -112.6, any int8 */
    const uint32_t word = 0x3c23d70au;
    for (size_t i = 0; i + 4 <= P_NREG * P_WBYTES; i += 4)
        memcpy(p->w + i, &word, 4);
    for (size_t i = 0; i < P_XF; i++) {
        p->x[i] = 0.5f - (float)(i % 7) * 0.125f;
        p->r[i] = 0.25f;
        p->y[i] = 0.0f;
    }
    return BC_OK;
}

/* The weights of the next decoding probe: the regions in turn. */
static const unsigned char *probe_weights(probe_mem *p)
{
    return p->w + (p->next++ % P_NREG) * P_WBYTES;
}

/* The weight regions a probe of family f streams (a decoding probe), none
 * for the others; q8_0i's family covers two formats and probes both. */
static size_t family_regions(int f)
{
    switch (f) {
    case BC_FAMILY_DECODE_F32: case BC_FAMILY_DECODE_BF16: case BC_FAMILY_DECODE_Q8_0:
    case BC_FAMILY_DECODE_ROWS: case BC_FAMILY_DECODE_BF16I: case BC_FAMILY_DECODE_Q4_KI:
        return 1;
    case BC_FAMILY_DECODE_Q8_0I:
        return 2;
    default:
        return 0;
    }
}

/* Evict the next decoding probe's `regions` weight regions from every cache
 * level (x86's clflush; elsewhere nothing), untimed, so that the probe reads
 * them from memory as decoding reads a model's. Beyond L2 is not far enough:
 * a server's L3 (480 MiB on the Intel Xeon family 6 model 167 measured) holds
 * all 34 MiB of them, and from L3 the AVX-512 bfloat16 decoder was 18% faster
 * than AVX2's, where on a 270 MB model, streamed from memory, it was 7-10%
 * slower. */
static void probe_evict(const probe_mem *p, size_t regions)
{
    for (size_t k = 0; k < regions; k++)
        bc_rt_evict(p->w + ((p->next + k) % P_NREG) * P_WBYTES, P_WBYTES);
}

void bc_rt_evict(const void *p, size_t bytes)
{
#if defined(__x86_64__) || defined(_M_X64)
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i += 64)
        _mm_clflush(b + i);
    _mm_mfence();
#else
    (void)p;
    (void)bytes;
#endif
}

double bc_rt_cpu_seconds(void)
{
    return cpu_now();
}

/* A prompt's product on rounded x: P_GN rows of P_PC values rounded (xq_rows),
 * then their product by P_GC rows of dtype's weights (xq_gemm, the weights from
 * the first region: each panel is reused by every row, so the arithmetic
 * decides, not where the weights come from). Timed with the decoding of the
 * format's family, so that prompts and decoding run the variant that did the
 * two faster: on an AMD Zen 4 (KVM) AVX2's q4_ki prompts ran at 0.43 times
 * AVX-512's speed (an 8B-shaped layer, 128 tokens) while the float32 GEMM's
 * probe, which chose for them before, timed the two within 2%. */
#define P_PC 1024
_Static_assert(P_GN * P_PC <= P_XF, "a prompt probe's rows of x fit p->x");
_Static_assert(P_GN * P_GC <= P_XF, "a prompt probe's outputs fit p->y");
_Static_assert(P_GN * (P_PC / 32) * 48 <= BC_GEMM_SCRATCH * sizeof(float),
               "a prompt probe's rounded rows (at most 48 bytes per 32 values) fit the scratch");
static void probe_prompt(const bc_kernel_table *kt, int dtype, probe_mem *p)
{
    const int wf = BC_WF_PANEL(dtype);
    const bc_gemm g = {p->y, p->x, p->w, NULL, NULL, P_GN, P_PC, P_GC, wf, BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
    unsigned char *xq = (unsigned char *)p->scratch;
    kt->wf[wf].xq_rows(xq, p->x, P_GN, P_PC);
    kt->wf[wf].xq_gemm(&g, xq, 0, P_GN, 0, P_GC);
}

/* A decoding product on rounded x: one row of 2048 values rounded (xq_rows),
 * then its product by oc rows of dtype's weights from the next region. */
static void probe_decode_xq(const bc_kernel_table *kt, int dtype, size_t oc, probe_mem *p)
{
    const int wf = BC_WF_PANEL(dtype);
    const bc_gemm g = {p->y, p->x, probe_weights(p), NULL, NULL, 1, 2048, oc, wf, BC_ACT_NONE,
                       BC_GEMM_PF_DEFAULT, NULL};
    unsigned char *xq = (unsigned char *)p->scratch;
    kt->wf[wf].xq_rows(xq, p->x, 1, 2048);
    kt->wf[wf].xq_part(&g, xq, 0, 1, 0, oc);
}

/* One probe of family f on kt. */
static void probe(int f, const bc_kernel_table *kt, probe_mem *p)
{
    switch (f) {
    case BC_FAMILY_GEMM: {
        const bc_gemm g32 = {p->y, p->x, p->w, NULL, NULL, P_GN, P_GC, P_GC,
                             BC_WF_PANEL(BC_DTYPE_F32), BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
        const bc_gemm g16 = {p->y, p->x, p->w, NULL, NULL, P_GN, P_GC, P_GC,
                             BC_WF_PANEL(BC_DTYPE_BF16), BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
        kt->gemm_part(&g32, 0, P_GN, 0, P_GC, p->scratch);
        kt->gemm_part(&g16, 0, P_GN, 0, P_GC, p->scratch);
        break;
    }
    case BC_FAMILY_DECODE_F32: case BC_FAMILY_DECODE_ROWS: {
        const int wf = family_wf(f);
        const bc_gemm g = {p->y, p->x, probe_weights(p), NULL, NULL, 1, P_DC, P_DC, wf,
                           BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
        kt->wf[wf].rows_part(&g, 0, P_DC);
        break;
    }
    case BC_FAMILY_DECODE_BF16: {
        const int wf = family_wf(f);
        const bc_gemm g = {p->y, p->x, probe_weights(p), NULL, NULL, 1, 2048, 1024, wf,
                           BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
        kt->wf[wf].rows_part(&g, 0, 1024);
        break;
    }
    case BC_FAMILY_DECODE_Q8_0: {
        /* a narrow model's matrix and a wide one's, half the region each:
         * how many panels the decoder keeps in flight matters by their size.
         * On an Intel Xeon (family 6 model 167, KVM), from memory, AVX-512's
         * 16 panels read 576-row matrices at least 24% faster than AVX2's 4,
         * and 2048-row ones up to 5% slower; a probe of 2048 rows alone chose
         * AVX2, and a SmolLM2-shaped decode ran 18-20% slower than AVX-512's */
        const int wf = family_wf(f);
        const unsigned char *w = probe_weights(p);
        const size_t narrow = bc_format_panel_bytes(bc_format_of(BC_DTYPE_Q8_0), P_QN) *
                              (P_QNO / BC_PANEL);
        const bc_gemm gn = {p->y, p->x, w, NULL, NULL, 1, P_QN, P_QNO, wf, BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
        const bc_gemm gw = {p->y, p->x, w + narrow, NULL, NULL, 1, 2048, 1024, wf,
                            BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
        kt->wf[wf].rows_part(&gn, 0, P_QNO);
        kt->wf[wf].rows_part(&gw, 0, 1024);
        break;
    }
    case BC_FAMILY_DECODE_Q8_0I: {
        /* one row quantised, then a 2048 x 2048 product of each of the
         * family's formats: q8_0i (the size of q8_0's) and q4_0i, whose
         * arithmetic per byte is twice q8_0i's (on the Xeon above, AVX2's q8_0i
         * product was as fast as AVX-512's from memory, its q4_0i one 25% slower) */
        const int w8 = BC_WF_PANEL(BC_DTYPE_Q8_0I), w4 = BC_WF_PANEL(BC_DTYPE_Q4_0I);
        const bc_gemm g8 = {p->y, p->x, probe_weights(p), NULL, NULL, 1, 2048, 2048, w8,
                            BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
        const bc_gemm g4 = {p->y, p->x, probe_weights(p), NULL, NULL, 1, 2048, 2048, w4,
                            BC_ACT_NONE, BC_GEMM_PF_DEFAULT, NULL};
        unsigned char *xq = (unsigned char *)p->scratch;
        kt->wf[w8].xq_rows(xq, p->x, 1, 2048);
        kt->wf[w8].xq_part(&g8, xq, 0, 1, 0, 2048);
        kt->wf[w4].xq_part(&g4, xq, 0, 1, 0, 2048);
        probe_prompt(kt, BC_DTYPE_Q4_KI, p);
        break;
    }
    case BC_FAMILY_DECODE_Q4_KI:  /* 2.25 MiB of the region */
        probe_decode_xq(kt, BC_DTYPE_Q4_KI, 2048, p);
        break;
    case BC_FAMILY_DECODE_BF16I:  /* bfloat16's product */
        probe_decode_xq(kt, BC_DTYPE_BF16I, 1024, p);
        probe_prompt(kt, BC_DTYPE_BF16I, p);
        break;
    case BC_FAMILY_ATTENTION: {
        /* a KV cache of P_TK keys as decoding sees it (keys in transposed
         * tiles, values in rows): one query of P_NH heads, then a prompt's
         * tile of P_TQ queries of one head */
        bc_attn a;
        memset(&a, 0, sizeof a);
        a.out = p->y;
        a.q = p->r;
        a.ldo = a.ldq = P_NH * P_DH;
        a.k = p->x;
        a.v = p->x + P_TK * P_DH;
        a.ldk = a.ldv = P_DH;
        a.khs = a.vhs = 0;
        a.k_tiled = 1;
        a.tk = P_TK;
        a.n_heads = P_NH;
        a.d_head = P_DH;
        a.kv_group = P_NH;
        a.causal = 1;
        a.tq = 1;
        a.q_pos0 = P_TK - 1;
        kt->attn_decode(&a, 0, 0, P_NH, p->scratch);
        a.tq = P_TQ;
        a.q_pos0 = P_TK - P_TQ;
        for (size_t i0 = 0; i0 < P_TQ; i0 += kt->attn_bq)
            kt->attn_unit(&a, 0, i0, p->scratch);
        break;
    }
    default:  /* BC_FAMILY_ELEMENTWISE */
        kt->swiglu(p->y, p->x, p->r, P_EW);
        kt->act(p->y, p->y, P_EW, BC_ACT_GELU_TANH);
        kt->add(p->y, p->y, p->r, P_EW);
        break;
    }
}

#define ROUNDS 4  /* timed rounds per candidate, after one untimed */
#define TIE 0.02

/* Measure the families with todo[f] set; choose each one's fastest. */
static int tune(const int todo[BC_NFAMILIES])
{
    int c[BC_NISAS];
    const int nc = candidates(c);
    if (nc < 2) {
        for (int f = 0; f < BC_NFAMILIES; f++)
            if (todo[f]) {
                g_choice[f] = c[0];
                g_how[f] = BC_CHOSEN_WIDEST;
            }
        return BC_OK;
    }
    probe_mem p;
    if (probe_alloc(&p, nc, c))
        return BC_ENOMEM;
    for (int f = 0; f < BC_NFAMILIES; f++) {
        if (!todo[f])
            continue;
        double best[BC_NISAS];
        for (int i = 0; i < nc; i++) {
            probe(f, bc_rt_table_of(c[i]), &p);  /* untimed: the code and data warm */
            best[i] = INFINITY;
        }
        for (int r = 0; r < ROUNDS; r++)
            for (int k = 0; k < nc; k++) {
                const int i = r % 2 ? nc - 1 - k : k;  /* the order alternates */
                probe_evict(&p, family_regions(f));
                const double t0 = cpu_now();
                probe(f, bc_rt_table_of(c[i]), &p);
                const double h = g_handicap[f][c[i]];
                if (h > 0.0)
                    while (cpu_now() - t0 < h)  /* a test's deliberately slow variant */
                        ;
                const double t = cpu_now() - t0;
                if (t < best[i])
                    best[i] = t;
            }
        int win = 0;
        for (int i = 0; i < BC_NISAS; i++)
            g_sec[f][i] = 0.0;
        for (int i = 0; i < nc; i++) {
            g_sec[f][c[i]] = best[i];
            /* a narrower variant must be clearly faster: within TIE of the
             * wider, noise decides nothing and the wider stays */
            if (best[i] < best[win] * (1.0 - TIE))
                win = i;
        }
        g_choice[f] = c[win];
        g_how[f] = BC_CHOSEN_TIMED;
    }
    probe_free(&p);
    return BC_OK;
}

/* Choose the families not chosen yet (under g_mu). */
static void choose_missing(void)
{
    int todo[BC_NFAMILIES], any = 0;
    for (int f = 0; f < BC_NFAMILIES; f++)
        any |= todo[f] = g_choice[f] < 0;
    if (any && tune(todo) != BC_OK) {
        int c[BC_NISAS];
        candidates(c);
        for (int f = 0; f < BC_NFAMILIES; f++)
            if (g_choice[f] < 0) {  /* no memory for the probes: the widest */
                g_choice[f] = c[0];
                g_how[f] = BC_CHOSEN_WIDEST;
            }
    }
}

/* Republish the table for the current choices (under g_mu). */
static void publish(void)
{
    const bc_kernel_table *t = assemble();
    STOREP(&g_auto, t);
}

const bc_kernel_table *bc_rt_auto_table(void)
{
    const bc_kernel_table *t = LOADP(&g_auto);
    if (t)
        return t;
    LOCK();
    choose_missing();
    publish();
    t = g_auto;
    UNLOCK();
    /* without memory for even the table: every family the widest */
    return t ? t : bc_rt_table_of(bc_rt_best_isa());
}

/* ---- the entry points ---------------------------------------------------- */

int bc_kernel_choice(int *isa, int *how, double *seconds, int family, size_t n_seconds)
{
    if (!isa || !how)
        return BC_ENULL;
    if (family < 0 || family >= BC_NFAMILIES)
        return BC_EOPTION;
    if (seconds && n_seconds < BC_NISAS)
        return BC_ESIZE;
    const int forced = bc_rt_forced_isa();
    LOCK();
    if (forced < 0)
        choose_missing();
    const int i = forced >= 0 ? forced : g_choice[family];
    const int h = forced >= 0 ? BC_CHOSEN_FORCED : g_how[family];
    double s[BC_NISAS];
    memcpy(s, g_sec[family], sizeof s);
    UNLOCK();
    *isa = i;
    *how = h;
    if (seconds)
        memcpy(seconds, s, sizeof s);
    return BC_OK;
}

int bc_set_kernel_choice(int family, int isa)
{
    if (family < 0 || family >= BC_NFAMILIES || !is_candidate(isa))
        return BC_EOPTION;
    LOCK();
    g_choice[family] = isa;
    g_how[family] = BC_CHOSEN_GIVEN;
    STOREP(&g_auto, (const bc_kernel_table *)NULL);  /* reassembled at the next call */
    UNLOCK();
    return BC_OK;
}

int bc_tune_kernels(void)
{
    int todo[BC_NFAMILIES];
    for (int f = 0; f < BC_NFAMILIES; f++)
        todo[f] = 1;
    LOCK();
    const int st = tune(todo);
    if (!st)
        STOREP(&g_auto, (const bc_kernel_table *)NULL);
    UNLOCK();
    return st;
}

int bc_tune_handicap(int family, int isa, double seconds)
{
    if (family < 0 || family >= BC_NFAMILIES || isa < 0 || isa >= BC_NISAS
        || !(seconds >= 0.0 && seconds <= 1.0))
        return BC_EOPTION;
    LOCK();
    g_handicap[family][isa] = seconds;
    UNLOCK();
    return BC_OK;
}

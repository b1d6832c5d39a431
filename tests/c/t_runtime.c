/* t_runtime.c: thread count and instruction set (csrc/bc_runtime.h), and the
 * promise that results do not depend on the thread count. */
#include <limits.h>
#include <math.h>
#include <string.h>
#include <stdint.h>

#include "harness.h"
#include "bc_rt.h"  /* the assembled table (internal): which variant a layout decodes with */

#define NB(n) ((n) * sizeof(float))

static void settings_checks(void)
{
    int *n = h_alloc_bytes(sizeof *n), before = 0, best = -1, isa = -1;
    EXPECT_STATUS(BC_ENULL, bc_get_num_threads(NULL));
    EXPECT_STATUS(BC_ENULL, bc_get_isa(NULL));
    EXPECT_STATUS(BC_ENULL, bc_best_isa(NULL));
    EXPECT_STATUS(BC_OK, bc_get_num_threads(&before));
    const int bad_n[] = {-1, INT_MIN, 4097, 100000, INT_MAX};
    for (int i = 0; i < 5; i++)
        EXPECT_STATUS(BC_ESIZE, bc_set_num_threads(bad_n[i]));
    EXPECT_STATUS(BC_OK, bc_get_num_threads(n));
    EXPECT(*n == before);  /* a refused setting changes nothing */
    EXPECT_STATUS(BC_OK, bc_set_num_threads(3));
    EXPECT_STATUS(BC_OK, bc_get_num_threads(n));
    EXPECT(*n == 3 || *n == 1);  /* 1 in a build without threads */
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT_STATUS(BC_OK, bc_get_num_threads(n));
    EXPECT(*n >= 1);

    EXPECT_STATUS(BC_OK, bc_best_isa(&best));
    EXPECT(best >= BC_ISA_GENERIC && best <= BC_ISA_AVX512);
    int start = -1;
    EXPECT_STATUS(BC_OK, bc_get_isa(&start));
    EXPECT(start == BC_ISA_AUTO || (start >= BC_ISA_GENERIC && start <= best));
    const int bad_isa[] = {-1, 4, 99, INT_MIN, INT_MAX};
    for (int i = 0; i < 5; i++)
        EXPECT_STATUS(BC_EOPTION, bc_set_isa(bad_isa[i]));
    if (best < BC_ISA_AVX512)
        EXPECT_STATUS(BC_EOPTION, bc_set_isa(best + 1));  /* more than the CPU has */
    for (int i = BC_ISA_GENERIC; i <= best; i++) {
        EXPECT_STATUS(BC_OK, bc_set_isa(i));
        EXPECT_STATUS(BC_OK, bc_get_isa(&isa));
        EXPECT(isa == i);
    }
    EXPECT_STATUS(BC_OK, bc_set_isa(BC_ISA_AUTO));
    EXPECT_STATUS(BC_OK, bc_get_isa(&isa));
    EXPECT(isa == BC_ISA_AUTO);
    EXPECT_STATUS(BC_OK, bc_set_isa(start));
}

/* Each kernel family's variant (tune.c): reported, installed, measured, and a
 * deliberately slow one not chosen. */
static void choice_checks(void)
{
    int best = 0, start = 0, isa = -1, how = -1;
    double sec[BC_NISAS];
    EXPECT_STATUS(BC_OK, bc_best_isa(&best));
    EXPECT_STATUS(BC_OK, bc_get_isa(&start));
    EXPECT_STATUS(BC_ENULL, bc_kernel_choice(NULL, &how, sec, 0, BC_NISAS));
    EXPECT_STATUS(BC_ENULL, bc_kernel_choice(&isa, NULL, sec, 0, BC_NISAS));
    EXPECT_STATUS(BC_EOPTION, bc_kernel_choice(&isa, &how, sec, -1, BC_NISAS));
    EXPECT_STATUS(BC_EOPTION, bc_kernel_choice(&isa, &how, sec, BC_NFAMILIES, BC_NISAS));
    EXPECT_STATUS(BC_ESIZE, bc_kernel_choice(&isa, &how, sec, 0, BC_NISAS - 1));
    EXPECT_STATUS(BC_EOPTION, bc_set_kernel_choice(-1, best));
    EXPECT_STATUS(BC_EOPTION, bc_set_kernel_choice(BC_NFAMILIES, best));
    EXPECT_STATUS(BC_EOPTION, bc_set_kernel_choice(0, BC_ISA_AUTO));
    EXPECT_STATUS(BC_EOPTION, bc_set_kernel_choice(0, best + 1));
    EXPECT_STATUS(BC_EOPTION, bc_tune_handicap(0, BC_NISAS, 0.0));
    EXPECT_STATUS(BC_EOPTION, bc_tune_handicap(BC_NFAMILIES, 0, 0.0));
    EXPECT_STATUS(BC_EOPTION, bc_tune_handicap(0, 0, -1.0));
    EXPECT_STATUS(BC_EOPTION, bc_tune_handicap(0, 0, 2.0));
    EXPECT_STATUS(BC_EOPTION, bc_tune_handicap(0, 0, NAN));

    EXPECT_STATUS(BC_OK, bc_set_isa(BC_ISA_GENERIC));  /* forced: every family */
    for (int f = 0; f < BC_NFAMILIES; f++) {
        EXPECT_STATUS(BC_OK, bc_kernel_choice(&isa, &how, NULL, f, 0));
        EXPECT(isa == BC_ISA_GENERIC && how == BC_CHOSEN_FORCED);
    }
    EXPECT_STATUS(BC_OK, bc_set_isa(BC_ISA_AUTO));
    for (int f = 0; f < BC_NFAMILIES; f++) {
        EXPECT_STATUS(BC_OK, bc_kernel_choice(&isa, &how, sec, f, BC_NISAS));
        EXPECT(how == BC_CHOSEN_TIMED || how == BC_CHOSEN_WIDEST || how == BC_CHOSEN_GIVEN);
        EXPECT(isa >= BC_ISA_GENERIC && isa <= best);
    }
    EXPECT_STATUS(BC_OK, bc_tune_kernels());
    if (best == BC_ISA_AVX512) {  /* two candidates: the probe decides */
        /* the handicap is a floor on the slow variant's time: well above
         * what either variant took unhandicapped (a loaded or sanitized
         * run takes milliseconds), or it would handicap nothing */
        EXPECT_STATUS(BC_OK, bc_kernel_choice(&isa, &how, sec, BC_FAMILY_DECODE_BF16, BC_NISAS));
        double h = sec[BC_ISA_AVX2] > sec[BC_ISA_AVX512] ? sec[BC_ISA_AVX2] : sec[BC_ISA_AVX512];
        h = h * 8.0 + 0.002;
        if (h > 1.0)
            h = 1.0;
        for (int slow = BC_ISA_AVX2; slow <= BC_ISA_AVX512; slow++) {
            EXPECT_STATUS(BC_OK, bc_tune_handicap(BC_FAMILY_DECODE_BF16, slow, h));
            EXPECT_STATUS(BC_OK, bc_tune_kernels());
            EXPECT_STATUS(BC_OK, bc_kernel_choice(&isa, &how, sec, BC_FAMILY_DECODE_BF16, BC_NISAS));
            EXPECT(isa != slow && how == BC_CHOSEN_TIMED && sec[slow] >= h && sec[isa] < h);
            EXPECT_STATUS(BC_OK, bc_tune_handicap(BC_FAMILY_DECODE_BF16, slow, 0.0));
        }
        /* float16's decoder goes with bfloat16's family, not the GEMM's */
        const int f16 = BC_WF_PANEL(BC_DTYPE_F16), bf16 = BC_WF_PANEL(BC_DTYPE_BF16);
        for (int v = BC_ISA_AVX2; v <= BC_ISA_AVX512; v++) {
            EXPECT_STATUS(BC_OK, bc_set_kernel_choice(BC_FAMILY_GEMM, BC_ISA_AVX2 + BC_ISA_AVX512 - v));
            EXPECT_STATUS(BC_OK, bc_set_kernel_choice(BC_FAMILY_DECODE_BF16, v));
            const bc_kernel_table *t = bc_rt_auto_table(), *want = bc_rt_table_of(v);
            EXPECT(t->wf[f16].rows_part == want->wf[f16].rows_part);
            EXPECT(t->wf[bf16].rows_part == want->wf[bf16].rows_part);
            EXPECT(t->wf[f16].panels != want->wf[f16].panels);  /* prompts: the GEMM's */
        }
        EXPECT_STATUS(BC_OK, bc_set_kernel_choice(BC_FAMILY_GEMM, BC_ISA_AVX2));
        EXPECT_STATUS(BC_OK, bc_kernel_choice(&isa, &how, NULL, BC_FAMILY_GEMM, 0));
        EXPECT(isa == BC_ISA_AVX2 && how == BC_CHOSEN_GIVEN);
        EXPECT_STATUS(BC_EOPTION, bc_set_kernel_choice(BC_FAMILY_GEMM, BC_ISA_GENERIC));
        EXPECT_STATUS(BC_OK, bc_tune_kernels());
    }
    EXPECT_STATUS(BC_OK, bc_set_isa(start));
}

/* One block and one GPT pass at the current settings, sized past the
 * kernels' parallel threshold. */
enum { D = 128, H = 4, F = 256, B = 2, T = 65, ND = B * T * D, V = 300 };

typedef struct {
    bc_block_config cfg;
    bc_block_weights w;
    float *x, *work;
    size_t need;
    bc_gpt_config gcfg;
    float *params, *gwork;
    size_t gneed;
    int32_t ids[B * T];
} fixture;

static void setup(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->cfg.d_model = D;
    f->cfg.n_heads = H;
    f->cfg.d_ff = F;
    f->cfg.norm = BC_NORM_LAYER;
    f->cfg.placement = BC_PLACE_PRE;
    f->cfg.activation = BC_ACT_SWIGLU;
    f->cfg.causal = 1;
    f->cfg.residual = 1;
    f->cfg.eps = 1e-5f;
    float *p;
    uint32_t seed = 300;
#define PART(field, n) (p = h_alloc(n), h_fill(p, (n), seed++, 0.2f), f->w.field = p)
    PART(qkv_w, 3 * D * D); PART(qkv_b, 3 * D); PART(proj_w, D * D);
    PART(up_w, F * D); PART(gate_w, F * D); PART(down_w, D * F); PART(down_b, D);
    PART(ln1_w, D); PART(ln1_b, D); PART(ln2_w, D);
#undef PART
    f->x = h_alloc(ND);
    h_fill(f->x, ND, 7, 1.0f);
    EXPECT_STATUS(BC_OK, bc_block_workspace_size(&f->need, &f->cfg, B, T));
    f->work = h_alloc(f->need);

    f->gcfg.vocab = V;
    f->gcfg.context = T;
    f->gcfg.width = D;
    f->gcfg.heads = H;
    f->gcfg.layers = 2;
    f->gcfg.eps = 1e-5f;
    f->gcfg.tie_weights = 1;
    size_t nbytes = 0;  /* the packed layout's bytes (panels padded), not the count */
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&nbytes, &f->gcfg));
    f->params = h_alloc(nbytes / sizeof(float));
    h_fill(f->params, nbytes / sizeof(float), 8, 0.1f);
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&f->gneed, &f->gcfg, B, T, NULL));
    f->gwork = h_alloc(f->gneed);
    for (int i = 0; i < B * T; i++)
        f->ids[i] = (i * 13 + 5) % V;
}

static void run(fixture *f, float *y, float *logits)
{
    EXPECT_STATUS(BC_OK, bc_block_forward(y, f->x, &f->cfg, &f->w, B, T, f->work, f->need));
    EXPECT_STATUS(BC_OK, bc_gpt_forward(logits, NULL, NULL, f->params, &f->gcfg, f->ids,
                                        BC_IDS_INT32, B, T, 0, f->gwork, f->gneed));
}

static void determinism_checks(void)
{
    fixture f;
    setup(&f);
    int best = 0, start = 0;
    EXPECT_STATUS(BC_OK, bc_best_isa(&best));
    EXPECT_STATUS(BC_OK, bc_get_isa(&start));
    float *y0 = h_alloc(ND), *l0 = h_alloc(B * T * V);
    float *y = h_alloc(ND), *l = h_alloc(B * T * V);
    float *yg = h_alloc(ND), *lg = h_alloc(B * T * V);
    const int threads[] = {1, 2, 3, 5};
    for (int isa = BC_ISA_GENERIC; isa <= best; isa++) {
        EXPECT_STATUS(BC_OK, bc_set_isa(isa));
        EXPECT_STATUS(BC_OK, bc_set_num_threads(1));
        run(&f, y0, l0);
        EXPECT(h_finite(y0, ND) && h_finite(l0, B * T * V));
        if (isa == BC_ISA_GENERIC) {
            memcpy(yg, y0, NB(ND));
            memcpy(lg, l0, NB(B * T * V));
        } else {  /* other instruction sets: within float32 tolerance */
            int ok = 1;
            for (int i = 0; i < ND; i++)
                ok &= fabsf(y0[i] - yg[i]) <= 1e-4f * (1.0f + fabsf(yg[i]));
            for (int i = 0; i < B * T * V; i++)
                ok &= fabsf(l0[i] - lg[i]) <= 1e-4f * (1.0f + fabsf(lg[i]));
            EXPECT(ok);
        }
        /* any thread count: the same bits */
        for (int k = 1; k < 4; k++) {
            EXPECT_STATUS(BC_OK, bc_set_num_threads(threads[k]));
            h_refill(y, NB(ND));
            h_refill(l, NB(B * T * V));
            run(&f, y, l);
            EXPECT(memcmp(y, y0, NB(ND)) == 0);
            EXPECT(memcmp(l, l0, NB(B * T * V)) == 0);
        }
    }
    /* auto, any mix of the FMA variants: the bits of the widest */
    if (best == BC_ISA_AVX512) {
        EXPECT_STATUS(BC_OK, bc_set_isa(BC_ISA_AVX512));
        EXPECT_STATUS(BC_OK, bc_set_num_threads(1));
        run(&f, y0, l0);
        EXPECT_STATUS(BC_OK, bc_set_isa(BC_ISA_AUTO));
        for (int mix = 0; mix < 4; mix++) {
            for (int fam = 0; fam < BC_NFAMILIES; fam++)  /* all avx2, then mixes */
                EXPECT_STATUS(BC_OK, bc_set_kernel_choice(fam, mix == 0 || ((fam + mix) & 1)
                                                              ? BC_ISA_AVX2 : BC_ISA_AVX512));
            EXPECT_STATUS(BC_OK, bc_set_num_threads(threads[mix]));
            h_refill(y, NB(ND));
            h_refill(l, NB(B * T * V));
            run(&f, y, l);
            EXPECT(memcmp(y, y0, NB(ND)) == 0);
            EXPECT(memcmp(l, l0, NB(B * T * V)) == 0);
        }
        EXPECT_STATUS(BC_OK, bc_tune_kernels());
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT_STATUS(BC_OK, bc_set_isa(start));
}

/* bc_advise_small_pages: advice that changes no byte of the memory it is given
 * (its effect on the pages is tests/test_pages.py's, read from smaps). */
static void pages_checks(void)
{
    EXPECT_STATUS(BC_OK, bc_advise_small_pages(NULL, 0));
    EXPECT_STATUS(BC_ENULL, bc_advise_small_pages(NULL, 1));
    /* a range past the end of the address space: refused before any call */
    EXPECT_STATUS(BC_EOVERFLOW, bc_advise_small_pages((void *)(UINTPTR_MAX - 15), 64));
    const size_t n = (size_t)3 << 20;  /* 12 MiB: whole huge pages inside */
    float *p = h_alloc(n);
    h_fill(p, n, 7u, 1.0f);
    float *copy = h_alloc(n);
    memcpy(copy, p, NB(n));
    EXPECT_STATUS(BC_OK, bc_advise_small_pages(p, NB(n)));
    EXPECT_STATUS(BC_OK, bc_advise_small_pages(p + 1, 5));  /* no whole page inside */
    EXPECT(memcmp(p, copy, NB(n)) == 0);
    EXPECT(h_guard_ok(p, NB(n)));
    p[n - 1] = -p[n - 1];  /* still writable */
    EXPECT(p[n - 1] == -copy[n - 1]);
}

/* bc_out_take / bc_out_give: a block handed back is the next one taken when it
 * fits (less than twice the bytes asked), never while a caller holds it; the
 * kept list bounded by BC_OUT_KEEP blocks (the oldest dropped first). */
static void outbuf_checks(void)
{
    void *p = NULL, *q = NULL, *r = NULL;
    size_t blocks = 9, bytes = 9;
    EXPECT_STATUS(BC_ENULL, bc_out_take(NULL, 64));
    EXPECT_STATUS(BC_ESIZE, bc_out_take(&p, 0));
    EXPECT(p == NULL);
    EXPECT_STATUS(BC_ESIZE, bc_out_take(&p, SIZE_MAX - 8));
    EXPECT_STATUS(BC_ENULL, bc_out_kept(NULL, &bytes));
    EXPECT_STATUS(BC_OK, bc_out_give(NULL));
    EXPECT_STATUS(BC_OK, bc_out_release());
    EXPECT_STATUS(BC_OK, bc_out_kept(&blocks, &bytes));
    EXPECT(blocks == 0 && bytes == 0);

    const size_t n = 100000;
    EXPECT_STATUS(BC_OK, bc_out_take(&p, n));
    EXPECT(p != NULL && (uintptr_t)p % 64 == 0);
    memset(p, 0x5a, n);  /* every byte writable */
    EXPECT_STATUS(BC_OK, bc_out_take(&q, n));  /* p is held: not q */
    EXPECT(q != NULL && q != p);
    EXPECT_STATUS(BC_OK, bc_out_give(p));
    EXPECT_STATUS(BC_OK, bc_out_kept(&blocks, &bytes));
    EXPECT(blocks == 1 && bytes == n);
    EXPECT_STATUS(BC_OK, bc_out_take(&r, n / 2 - 1));  /* p would waste half: a fresh one */
    EXPECT(r != p);
    EXPECT_STATUS(BC_OK, bc_out_give(r));
    EXPECT_STATUS(BC_OK, bc_out_take(&r, n - 10));  /* p fits: it comes back */
    EXPECT(r == p);
    EXPECT_STATUS(BC_OK, bc_out_give(r));
    EXPECT_STATUS(BC_OK, bc_out_give(q));
    EXPECT_STATUS(BC_OK, bc_out_kept(&blocks, &bytes));
    EXPECT(blocks == 3 && bytes == 2 * n + n / 2 - 1);

    /* more blocks handed back than are kept: the oldest go */
    void *many[BC_OUT_KEEP + 2];
    for (size_t i = 0; i < BC_OUT_KEEP + 2; i++)
        EXPECT_STATUS(BC_OK, bc_out_take(&many[i], 1000 * (i + 1)));
    for (size_t i = 0; i < BC_OUT_KEEP + 2; i++)
        EXPECT_STATUS(BC_OK, bc_out_give(many[i]));
    EXPECT_STATUS(BC_OK, bc_out_kept(&blocks, &bytes));
    EXPECT(blocks == BC_OUT_KEEP);
    size_t newest = 0;
    for (size_t i = 2; i < BC_OUT_KEEP + 2; i++)
        newest += 1000 * (i + 1);
    EXPECT(bytes == newest);
    EXPECT_STATUS(BC_OK, bc_out_release());
    EXPECT_STATUS(BC_OK, bc_out_kept(&blocks, &bytes));
    EXPECT(blocks == 0 && bytes == 0);
}

/* Integer decoding's software prefetch (prefetch.c): arguments refused,
 * forced modes reported for every group, a given choice installed, a timed
 * one, and a deliberately slow mode not chosen. */
static void prefetch_checks(void)
{
    int start = -1, mode = -1, on = -1, how = -1, best = 0;
    double sec[2];
    EXPECT_STATUS(BC_OK, bc_best_isa(&best));
    EXPECT_STATUS(BC_ENULL, bc_get_prefetch(NULL));
    EXPECT_STATUS(BC_OK, bc_get_prefetch(&start));
    EXPECT(start >= BC_PREFETCH_AUTO && start <= BC_PREFETCH_OFF);
    const int bad[] = {-1, 4, 99, INT_MIN, INT_MAX};
    for (int i = 0; i < 5; i++)
        EXPECT_STATUS(BC_EOPTION, bc_set_prefetch(bad[i]));
    EXPECT_STATUS(BC_OK, bc_get_prefetch(&mode));
    EXPECT(mode == start);  /* a refused setting changes nothing */
    EXPECT_STATUS(BC_ENULL, bc_prefetch_choice(NULL, &how, sec, 0, 2));
    EXPECT_STATUS(BC_ENULL, bc_prefetch_choice(&on, NULL, sec, 0, 2));
    EXPECT_STATUS(BC_EOPTION, bc_prefetch_choice(&on, &how, sec, -1, 2));
    EXPECT_STATUS(BC_EOPTION, bc_prefetch_choice(&on, &how, sec, BC_NPF_GROUPS, 2));
    EXPECT_STATUS(BC_ESIZE, bc_prefetch_choice(&on, &how, sec, 0, 1));
    EXPECT_STATUS(BC_EOPTION, bc_set_prefetch_choice(-1, 1));
    EXPECT_STATUS(BC_EOPTION, bc_set_prefetch_choice(BC_NPF_GROUPS, 1));
    EXPECT_STATUS(BC_EOPTION, bc_set_prefetch_choice(0, 2));
    EXPECT_STATUS(BC_EOPTION, bc_set_prefetch_choice(0, -1));
    EXPECT_STATUS(BC_EOPTION, bc_prefetch_handicap(BC_NPF_GROUPS, 0, 0.0));
    EXPECT_STATUS(BC_EOPTION, bc_prefetch_handicap(-1, 0, 0.0));
    EXPECT_STATUS(BC_EOPTION, bc_prefetch_handicap(0, 2, 0.0));
    EXPECT_STATUS(BC_EOPTION, bc_prefetch_handicap(0, 0, -1.0));
    EXPECT_STATUS(BC_EOPTION, bc_prefetch_handicap(0, 0, 2.0));
    EXPECT_STATUS(BC_EOPTION, bc_prefetch_handicap(0, 0, NAN));

    for (int m = BC_PREFETCH_DEFAULT; m <= BC_PREFETCH_OFF; m++) {  /* forced: every group */
        EXPECT_STATUS(BC_OK, bc_set_prefetch(m));
        EXPECT_STATUS(BC_OK, bc_get_prefetch(&mode));
        EXPECT(mode == m);
        for (int g = 0; g < BC_NPF_GROUPS; g++) {
            EXPECT_STATUS(BC_OK, bc_prefetch_choice(&on, &how, NULL, g, 0));
            const int want = m == BC_PREFETCH_ON ? 1 : m == BC_PREFETCH_OFF ? 0
                           : g == BC_PF_GROUP_BLOCKS;  /* the compiled split */
            EXPECT(on == want && how == BC_CHOSEN_FORCED);
        }
    }
    EXPECT_STATUS(BC_OK, bc_set_prefetch(BC_PREFETCH_AUTO));
    for (int g = 0; g < BC_NPF_GROUPS; g++) {
        EXPECT_STATUS(BC_OK, bc_prefetch_choice(&on, &how, sec, g, 2));
        EXPECT(on == 0 || on == 1);
        EXPECT(how == BC_CHOSEN_TIMED || how == BC_CHOSEN_WIDEST || how == BC_CHOSEN_GIVEN);
        for (int v = 0; v < 2; v++) {
            EXPECT_STATUS(BC_OK, bc_set_prefetch_choice(g, v));
            EXPECT_STATUS(BC_OK, bc_prefetch_choice(&on, &how, NULL, g, 0));
            EXPECT(on == v && how == BC_CHOSEN_GIVEN);
        }
    }
    EXPECT_STATUS(BC_OK, bc_tune_prefetch());
    if (best >= BC_ISA_AVX2) {  /* something to time: the probe decides */
        const int g = BC_PF_GROUP_FORWARD;
        EXPECT_STATUS(BC_OK, bc_prefetch_choice(&on, &how, sec, g, 2));
        EXPECT(how == BC_CHOSEN_TIMED && sec[0] > 0.0 && sec[1] > 0.0);
        /* a floor on the slow mode's time well above either's (see choice_checks) */
        double h = (sec[0] > sec[1] ? sec[0] : sec[1]) * 8.0 + 0.002;
        if (h > 1.0)
            h = 1.0;
        for (int slow = 0; slow < 2; slow++) {
            EXPECT_STATUS(BC_OK, bc_prefetch_handicap(g, slow, h));
            EXPECT_STATUS(BC_OK, bc_tune_prefetch());
            EXPECT_STATUS(BC_OK, bc_prefetch_choice(&on, &how, sec, g, 2));
            EXPECT(on != slow && how == BC_CHOSEN_TIMED && sec[slow] >= h && sec[on] < h);
            EXPECT_STATUS(BC_OK, bc_prefetch_handicap(g, slow, 0.0));
        }
    }
    EXPECT_STATUS(BC_OK, bc_set_prefetch(start));
}

void test_runtime(void)
{
    settings_checks();
    pages_checks();
    outbuf_checks();
    choice_checks();
    prefetch_checks();
    determinism_checks();
}

/* attention.c: multi-head scaled dot-product attention, one sequence. */
#include <math.h>
#include "kernels.h"

size_t bc_k_attention_work(size_t tq, size_t tk, size_t n_heads, size_t d_head)
{
    (void)tq; (void)n_heads; (void)d_head;
    return tk;  /* one row of scores */
}

// out (Tq,H*Dh), q (Tq,.), k (Tk,.), v (Tk,.); head h at column h*Dh of each
void bc_k_attention(float *out, size_t ldo,
                    const float *q, size_t ldq,
                    const float *k, size_t ldk,
                    const float *v, size_t ldv,
                    size_t tq, size_t tk, size_t n_heads, size_t d_head,
                    size_t q_pos0, int causal, float *work)
{
    const float scale = 1.0f / sqrtf((float)d_head);
    float *sc = work;
    for (size_t h = 0; h < n_heads; h++) {
        const size_t off = h * d_head;
        for (size_t i = 0; i < tq; i++) {
            const float *qi = q + i * ldq + off;
            float *oi = out + i * ldo + off;
            size_t nk = tk;
            if (causal) {
                size_t last = q_pos0 + i + 1;  /* keys 0..q_pos0+i are visible */
                nk = last < tk ? last : tk;
            }
            for (size_t d = 0; d < d_head; d++)
                oi[d] = 0.0f;
            if (nk == 0)
                continue;
            float mx = -INFINITY;
            for (size_t j = 0; j < nk; j++) {
                const float *kj = k + j * ldk + off;
                float s = 0.0f;
                for (size_t d = 0; d < d_head; d++)
                    s += qi[d] * kj[d];
                sc[j] = s * scale;
                if (sc[j] > mx)
                    mx = sc[j];
            }
            float sum = 0.0f;
            for (size_t j = 0; j < nk; j++) {
                sc[j] = expf(sc[j] - mx);
                sum += sc[j];
            }
            const float inv = 1.0f / sum;
            for (size_t j = 0; j < nk; j++) {
                const float *vj = v + j * ldv + off;
                const float p = sc[j] * inv;
                for (size_t d = 0; d < d_head; d++)
                    oi[d] += p * vj[d];
            }
        }
    }
}

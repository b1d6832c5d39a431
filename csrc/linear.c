/* linear.c: y = x @ w^T + b. */
#include "kernels.h"

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL
void bc_k_linear(float *y, const float *x, const float *w, const float *b,
                 size_t n, size_t c, size_t oc)
{
    for (size_t i = 0; i < n; i++) {
        const float *xi = x + i * c;
        float *yi = y + i * oc;
        for (size_t o = 0; o < oc; o++) {
            const float *wo = w + o * c;
            float s = 0.0f;
            for (size_t j = 0; j < c; j++)
                s += xi[j] * wo[j];
            yi[o] = b ? s + b[o] : s;
        }
    }
}

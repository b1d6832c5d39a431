/* fast_loss.h: the loss's kernel (part of the kernel template, fast_tmpl.h:
 * included once per instruction set): one row of the cross-entropy and its
 * gradient, together (the backward is the forward's softmax, scaled). Driven
 * over rows and threads by train.c. */

/* The cross-entropy of one row of logits: the max, then sum exp(z - max) in
 * VL lanes added in order at the end, lse = max + log(sum); the gradient
 * exp(z - max) / sum, scaled, minus scale at the target. */
// dz (V) or NULL, loss (1), z (V); target < V
static void xent_row(float *dz, float *loss, const float *z, size_t v, size_t target, float scale)
{
    const float zt = z[target];  /* read before dz (which may be z) is written */
    V mx = vset1(-INFINITY);
    size_t j = 0;
    for (; j + VL <= v; j += VL)
        mx = vmax(mx, vload(z + j));
    float m = -INFINITY, t[VL];
    vstore(t, mx);
    for (int i = 0; i < VL; i++)
        m = t[i] > m ? t[i] : m;
    for (; j < v; j++)
        m = z[j] > m ? z[j] : m;
    const V mv = vset1(m);
    V acc = vzero();
    j = 0;
    for (; j + VL <= v; j += VL) {
        const V e = vexp(vsub(vload(z + j), mv));
        if (dz)
            vstore(dz + j, e);
        acc = vadd(acc, e);
    }
    if (j < v) {
        const V e = vexp(vsub(vloadn(z + j, v - j), mv));
        if (dz)
            vstoren(dz + j, e, v - j);
        acc = vadd(acc, vkeep_lo(vzero(), e, v - j));  /* the lanes past v add nothing */
    }
    vstore(t, acc);
    float sum = 0.0f;
    for (int i = 0; i < VL; i++)
        sum += t[i];
    *loss = m + logf(sum) - zt;
    if (!dz)
        return;
    const V f = vset1(scale / sum);
    j = 0;
    for (; j + VL <= v; j += VL)
        vstore(dz + j, vmul(vload(dz + j), f));
    if (j < v)
        vstoren(dz + j, vmul(vloadn(dz + j, v - j), f), v - j);
    dz[target] -= scale;
}


/* moe_load.c — each layer's MoE on the GPU: the fast path (moe_cuda.h, kernels/sm90/moe_*) where the
 * model's shape fits its kernels, else the generic kernel (v4_moe_ref, fp32 weights; tiny models).
 *
 * Fast path, at load: routed experts stored as NVFP4 (ModelOpt) or MXFP4 (DeepSeek) are repacked as
 * loaded (exact); any other expert format is quantised to NVFP4 on the GPU (ModelOpt rounding: lossy,
 * like --quantize-experts nvfp4); a shared expert stored as FP8 (128x128 block scales) is used as is,
 * any other format is quantised to FP8 E4M3 with one fp32 scale per 128x128 block (amax / 448); the
 * router weight is uploaded in fp32, the bias and hash table as stored. Last, where GPU memory
 * allows, each shared expert also in bf16 (SLUICE_CUDA_SHARED_BF16 0 / 1 / auto).
 * A rank of a model split across GPUs (engine/shard.h) holds every expert's share of intermediate units: w1 and w3
 * rows, w2 columns, cut after decoding or drawing (synthetic) the whole expert on the GPU, or on the host from a
 * checkpoint's FP4 and FP8 bytes; the router whole.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* ---- load time */

static int is_fp4(qt_format f) { return f == QT_NVFP4 || f == QT_MXFP4; }

/* Format the layer's routed experts are served in: their own (*native = 1) when every tensor of
 * every expert is the same FP4 format, else NVFP4 (quantised at load, *native = 0). */
static qt_format layer_fp4(const v4_layer_w *Lw, int E, int *native)
{
    const qt_format f = Lw->experts[0].w1.fmt;
    *native = 0;
    if (!is_fp4(f)) return QT_NVFP4;
    for (int e = 0; e < E; e++) {
        const v4_expert_w *x = &Lw->experts[e];
        if (x->w1.fmt != f || x->w2.fmt != f || x->w3.fmt != f) return QT_NVFP4;
    }
    *native = 1;
    return f;
}

/* Load scratch for quantising non-FP4 experts on the GPU. */
typedef struct {
    float *host;              /* [max n*k] */
    float *dw;                /* device fp32 [max n*k] */
    uint8_t *dq[3], *ds[3];   /* device NVFP4 codes / E4M3 scales per matrix */
    float *d2;                /* device [3] scale_2 */
    uint8_t *wq, *ws;         /* a rank's columns of w2 (codes, scales), engine/shard.h */
} quant_scratch;

static void qs_free(quant_scratch *q)
{
    free(q->host);
    if (q->dw) cudaFree(q->dw);
    for (int m = 0; m < 3; m++) {
        if (q->dq[m]) cudaFree(q->dq[m]);
        if (q->ds[m]) cudaFree(q->ds[m]);
    }
    if (q->d2) cudaFree(q->d2);
    if (q->wq) cudaFree(q->wq);
    if (q->ws) cudaFree(q->ws);
    memset(q, 0, sizeof *q);
}

static int qs_init(quant_scratch *q, int H, int I, int split)
{
    const size_t nk = (size_t)H * I;
    memset(q, 0, sizeof *q);
    if (!(q->host = malloc(nk * sizeof(float)))) return -1;
    if (cudaMalloc((void **)&q->dw, nk * sizeof(float)) != cudaSuccess) return -1;
    for (int m = 0; m < 3; m++)
        if (cudaMalloc((void **)&q->dq[m], nk / 2) != cudaSuccess || cudaMalloc((void **)&q->ds[m], nk / 16) != cudaSuccess)
            return -1;
    if (split && (cudaMalloc((void **)&q->wq, nk / 2) != cudaSuccess || cudaMalloc((void **)&q->ws, nk / 16) != cudaSuccess))
        return -1;
    return cudaMalloc((void **)&q->d2, 3 * sizeof(float)) == cudaSuccess ? 0 : -1;
}

/* Upload expert e from the whole expert's FP4 codes and scales in q (fmt, hidden H, width I): this rank's units
 * [sh->i0, + sh->ni): rows of w1 and w3 (contiguous), columns of w2 (copied into q->wq, q->ws). */
static int set_expert_part(moe_cuda_layer *L, int e, quant_scratch *q, const float s2[3], qt_format fmt, int H, int I,
                           const v4_shard *sh)
{
    if (sh->ni == I) return moe_cuda_set_expert_dev(L, e, (const uint8_t *const *)q->dq, (const uint8_t *const *)q->ds, s2);
    const int blk = fmt == QT_NVFP4 ? 16 : 32, ni = sh->ni, i0 = sh->i0;
    const uint8_t *dq[3], *ds[3];
    for (int m = 0; m < 2; m++) {
        dq[m] = q->dq[m] + (size_t)i0 * H / 2;
        ds[m] = q->ds[m] + (size_t)i0 * H / blk;
    }
    if (cudaMemcpy2D(q->wq, (size_t)ni / 2, q->dq[2] + i0 / 2, (size_t)I / 2, (size_t)ni / 2, (size_t)H,
                     cudaMemcpyDeviceToDevice) != cudaSuccess ||
        cudaMemcpy2D(q->ws, (size_t)ni / blk, q->ds[2] + i0 / blk, (size_t)I / blk, (size_t)ni / blk, (size_t)H,
                     cudaMemcpyDeviceToDevice) != cudaSuccess)
        return -1;
    dq[2] = q->wq;
    ds[2] = q->ws;
    return moe_cuda_set_expert_dev(L, e, dq, ds, s2);
}

/* Expert e of a layer whose experts are not FP4: dequantise on the host, NVFP4-quantise on the GPU. */
static int quantise_expert(moe_cuda_layer *L, int e, const v4_expert_w *x, quant_scratch *q, const v4_shard *sh)
{
    const qtensor *w[3] = {&x->w1, &x->w3, &x->w2};
    float s2[3];
    for (int m = 0; m < 3; m++) {
        const int n = w[m]->rows, k = w[m]->cols;
        for (int r = 0; r < n; r++) qt_dequant_row(w[m], r, q->host + (size_t)r * k);
        if (cudaMemcpy(q->dw, q->host, (size_t)n * k * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
            moe_cuda_quantize_nvfp4(q->dw, n, k, q->dq[m], q->ds[m], q->d2 + m, 0) ||
            cudaMemcpy(&s2[m], q->d2 + m, sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
            return -1;
    }
    return set_expert_part(L, e, q, s2, QT_NVFP4, x->w1.cols, x->w1.rows, sh);
}

/* Expert e of a synthetic model (synth_seed): its codes and scales drawn on the GPU (synthetic.h). */
static int synth_expert(moe_cuda_layer *L, int e, const v4_expert_w *x, quant_scratch *q, const v4_shard *sh)
{
    const qtensor *w[3] = {&x->w1, &x->w3, &x->w2};
    float s2[3];
    for (int m = 0; m < 3; m++) {
        const int nv = w[m]->fmt == QT_NVFP4;
        const size_t n = (size_t)w[m]->rows * w[m]->cols;
        if (v4_fill_random(q->dq[m], n / 2, w[m]->synth_seed, 0, 256, 0) != cudaSuccess ||
            v4_fill_random(q->ds[m], n / (nv ? 16 : 32), w[m]->synth_seed * 7 + 3, w[m]->synth_scale, nv ? 8 : 2, 0) !=
                cudaSuccess)
            return -1;
        s2[m] = w[m]->scale2;
    }
    return set_expert_part(L, e, q, s2, x->w1.fmt, x->w1.cols, x->w1.rows, sh);
}

/* p[0..2] = the intermediate units [i0, i0+ni) of an expert on the host: w1 and w3 rows, w2 columns (qt_slice). 0, or
 * -1 with nothing left to free. */
static int cut_expert(const v4_expert_w *x, int i0, int ni, qtensor p[3])
{
    const int H = x->w1.cols;
    memset(p, 0, 3 * sizeof *p);
    if (!qt_slice(&x->w1, i0, ni, 0, H, &p[0]) && !qt_slice(&x->w3, i0, ni, 0, H, &p[1]) &&
        !qt_slice(&x->w2, 0, H, i0, ni, &p[2]))
        return 0;
    for (int m = 0; m < 3; m++) qt_free(&p[m]);
    return -1;
}

/* Expert e stored in the served FP4 format on the host: as is, or this rank's units cut on the host. */
static int host_expert(moe_cuda_layer *L, int e, const v4_expert_w *x, const v4_shard *sh)
{
    if (sh->ni == x->w1.rows) return moe_cuda_set_expert(L, e, &x->w1, &x->w3, &x->w2);
    qtensor p[3];
    if (cut_expert(x, sh->i0, sh->ni, p)) return -1;
    const int rc = moe_cuda_set_expert(L, e, &p[0], &p[1], &p[2]);
    for (int m = 0; m < 3; m++) qt_free(&p[m]);
    return rc;
}

/* A shared expert that is not FP8: E4M3 codes with one fp32 scale (amax / 448) per 128x128 block. */
static int fp8_from(const qtensor *src, qtensor *dst)
{
    const int n = src->rows, k = src->cols, bn = n / 128, bk = k / 128;
    float *w = malloc((size_t)n * k * sizeof(float)), *sc = malloc((size_t)bn * bk * sizeof(float));
    uint8_t *d = malloc((size_t)n * k);
    if (!w || !sc || !d) { free(w); free(sc); free(d); return -1; }
    for (int r = 0; r < n; r++) qt_dequant_row(src, r, w + (size_t)r * k);
    for (int bi = 0; bi < bn; bi++)
        for (int bj = 0; bj < bk; bj++) {
            float amax = 0.f;
            for (int r = bi * 128; r < bi * 128 + 128; r++)
                for (int j = bj * 128; j < bj * 128 + 128; j++) amax = fmaxf(amax, fabsf(w[(size_t)r * k + j]));
            const float s = amax > 0.f ? amax / 448.f : 1.f;
            sc[bi * bk + bj] = s;
            for (int r = bi * 128; r < bi * 128 + 128; r++)
                for (int j = bj * 128; j < bj * 128 + 128; j++) d[(size_t)r * k + j] = qt_f32_to_e4m3(w[(size_t)r * k + j] / s);
        }
    free(w);
    *dst = (qtensor){.fmt = QT_FP8_B128, .rows = n, .cols = k, .data = d, .scale = sc, .scale_is_f32 = 1, .scale2 = 1.f};
    return 0;
}

static int load_shared_whole(moe_cuda_layer *L, const qtensor *const w[3])
{
    if (w[0]->fmt == QT_FP8_B128 && w[1]->fmt == QT_FP8_B128 && w[2]->fmt == QT_FP8_B128)
        return moe_cuda_set_shared(L, w[0], w[1], w[2]);
    qtensor t[3] = {{0}};
    int rc = -1;
    if (!fp8_from(w[0], &t[0]) && !fp8_from(w[1], &t[1]) && !fp8_from(w[2], &t[2]))
        rc = moe_cuda_set_shared(L, &t[0], &t[1], &t[2]);
    for (int m = 0; m < 3; m++) { free((void *)t[m].data); free((void *)t[m].scale); }
    return rc;
}

/* The shared expert, or this rank's units of it (sh->si0, sh->sni: w1 and w3 rows, w2 columns). */
static int load_shared(moe_cuda_layer *L, const v4_expert_w *s, const v4_shard *sh)
{
    const qtensor *w[3] = {&s->w1, &s->w3, &s->w2};
    if (sh->sni == s->w1.rows) return load_shared_whole(L, w);
    qtensor p[3];
    if (cut_expert(s, sh->si0, sh->sni, p)) return -1;
    const qtensor *pw[3] = {&p[0], &p[1], &p[2]};
    const int rc = load_shared_whole(L, pw);
    for (int m = 0; m < 3; m++) qt_free(&p[m]);
    return rc;
}

static float *router_f32(const qtensor *g)
{
    float *o = malloc((size_t)g->rows * g->cols * sizeof(float));
    if (o)
        for (int r = 0; r < g->rows; r++) qt_dequant_row(g, r, o + (size_t)r * g->cols);
    return o;
}

static int load_layer(moe_cuda_layer *L, const v4_weights *w, const v4_shard *sh, int l, quant_scratch *qs, char *err,
                      size_t errlen)
{
    const v4_config *cfg = &w->cfg;
    const v4_layer_w *Lw = &w->layers[l];
    const int E = cfg->n_routed_experts;
    int keep;
    const qt_format fmt = layer_fp4(Lw, E, &keep);
    moe_cuda_shape s = {
        .n_experts = E, .hidden = cfg->dim, .inter = sh->ni, .topk = cfg->n_active,
        .score_func = cfg->score_func == V4_SCORE_SOFTMAX ? MOE_SCORE_SOFTMAX
                      : cfg->score_func == V4_SCORE_SIGMOID ? MOE_SCORE_SIGMOID : MOE_SCORE_SQRTSOFTPLUS,
        .route_scale = cfg->route_scale, .swiglu_limit = cfg->swiglu_limit,
        .hash = Lw->tid2eid != NULL, .vocab = cfg->vocab_size,
        .has_shared = cfg->n_shared_experts > 0 && Lw->shared.w1.data != NULL,
        .fp4_fmt = fmt,
    };
    if (moe_cuda_layer_init(L, &s)) {
        snprintf(err, errlen, "cuda backend: layer %d: cannot set up the GPU MoE (see the line above)", l);
        return -1;
    }
    float *gate = router_f32(&Lw->gate);
    if (!gate) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
    int rc = moe_cuda_set_router(L, gate, Lw->gate_bias, Lw->tid2eid);
    free(gate);
    if (rc) { snprintf(err, errlen, "cuda backend: layer %d: router upload failed", l); return -1; }
    const int synth = Lw->experts[0].w1.synth_seed != 0;
    if ((!keep || synth) && !qs->host && qs_init(qs, cfg->dim, cfg->moe_inter, sh->n > 1)) {
        snprintf(err, errlen, "cuda backend: out of memory for the load-time NVFP4 quantiser");
        return -1;
    }
    for (int e = 0; e < E; e++) {
        const v4_expert_w *x = &Lw->experts[e];
        if (synth ? synth_expert(L, e, x, qs, sh) : keep ? host_expert(L, e, x, sh) : quantise_expert(L, e, x, qs, sh)) {
            snprintf(err, errlen, "cuda backend: layer %d expert %d: upload to the GPU failed", l, e);
            return -1;
        }
    }
    if (s.has_shared && load_shared(L, &Lw->shared, sh)) {
        snprintf(err, errlen, "cuda backend: layer %d: shared expert upload failed", l);
        return -1;
    }
    if (L->clamped_scales)
        fprintf(stderr, "cuda backend: layer %d: %d MXFP4 block scales clamped (> 31 binades above the smallest)\n", l,
                L->clamped_scales);
    return 0;
}

/* The shared expert's bf16 copy (moe_cuda_alloc_shared_bf16), with which large steps run it as two bf16 GEMMs (the
 * path sluice-bench moe measures from 256 tokens) instead of the FP8 kernels; 2 bytes per weight beside the FP8 copy
 * (+50 MB per V4-Flash layer).
 * Added after every buffer the backend needs, layer by layer while the GPU keeps `reserve` bytes free (the share
 * beyond engine.gpu_memory_fraction). SLUICE_CUDA_SHARED_BF16: 0 never, 1 every layer (an open error if one does not
 * fit), unset or "auto": as far as it fits. */

static int add_shared_bf16(moe_cuda_layer *Ls, const int *fast, int n_layers, const v4_weights *w, const v4_shard *sh,
                           size_t reserve, char *err, size_t errlen)
{
    const char *ev = getenv("SLUICE_CUDA_SHARED_BF16");
    int mode = -1;
    if (ev && *ev && strcmp(ev, "auto")) {
        if (strcmp(ev, "0") && strcmp(ev, "1")) {
            snprintf(err, errlen, "cuda backend: SLUICE_CUDA_SHARED_BF16='%s' must be 0, 1 or auto", ev);
            return -1;
        }
        mode = ev[0] == '1';
    }
    if (!mode) return 0;
    int n = 0, done = 0;
    for (int l = 0; l < n_layers; l++) n += fast[l] && Ls[l].s.has_shared;
    for (int l = 0; l < n_layers; l++) {
        moe_cuda_layer *L = &Ls[l];
        if (!fast[l] || !L->s.has_shared) continue;
        /* the copy, and the FP8 upload moe_cuda_set_shared stages it from */
        const size_t need = (size_t)9 * L->s.inter * L->s.hidden;
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) fr = tot = 0;
        if (fr < need + reserve) {
            if (mode < 0) break;
            snprintf(err, errlen, "cuda backend: layer %d: no GPU memory for the shared expert's bf16 copy (%zu MiB free; "
                     "SLUICE_CUDA_SHARED_BF16=1)", l, fr >> 20);
            return -1;
        }
        if (moe_cuda_alloc_shared_bf16(L) || load_shared(L, &w->layers[l].shared, sh)) {
            snprintf(err, errlen, "cuda backend: layer %d: the shared expert's bf16 copy failed (see the line above)", l);
            return -1;
        }
        done++;
    }
    if (done < n)
        fprintf(stderr, "cuda backend: the shared expert's bf16 copy fits %d of %d layers (within the GPU memory "
                "fraction); the others run it on the FP8 kernels at every batch\n", done, n);
    return 0;
}

int gpu_moe_fast_fits(const v4_weights *w, const v4_shard *sh, char *err, size_t errlen)
{
    const v4_config *c = &w->cfg;
    const char *k = "the GPU MoE kernels (kernels/moe_kernels.h)";
    if (c->dim % 256 || c->dim > 8192) {
        snprintf(err, errlen, "cuda backend: hidden_size %d does not fit %s: it must be a multiple of 256 and <= 8192",
                 c->dim, k);
        return -1;
    }
    if (sh->ni % 128 || sh->ni > 8192) {
        snprintf(err, errlen, "cuda backend: moe_intermediate_size %d%s does not fit %s: it must be a multiple of 128 and "
                 "<= 8192", sh->ni, sh->n > 1 ? " (a GPU's share)" : "", k);
        return -1;
    }
    if (c->n_routed_experts < 1 || c->n_routed_experts > 512 || c->n_active < 1 || c->n_active > 32 ||
        c->n_active > c->n_routed_experts) {
        snprintf(err, errlen, "cuda backend: %d routed experts, top-%d does not fit %s: at most 512 experts, top-k <= 32",
                 c->n_routed_experts, c->n_active, k);
        return -1;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const v4_layer_w *L = &w->layers[l];
        if (c->n_shared_experts > 0 && L->shared.w1.data && L->shared.w1.rows != c->moe_inter) {
            snprintf(err, errlen, "cuda backend: layer %d: shared expert width %d (n_shared_experts %d) does not fit %s: "
                     "it must equal moe_intermediate_size %d", l, L->shared.w1.rows, c->n_shared_experts, k, c->moe_inter);
            return -1;
        }
    }
    return 0;
}


static float *dev_f32(const float *h, size_t n)
{
    float *d = NULL;
    if (cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) { cudaFree(d); return NULL; }
    return d;
}

/* fp32 copy of the windows rows [r0, r0+nr) x cols [c0, c0+nc) of matrices, stacked [count][nr][nc] */
static float *dev_stack_part(const qtensor *const *q, int count, int r0, int nr, int c0, int nc)
{
    const size_t per = (size_t)nr * nc;
    float *h = malloc(per * count * sizeof(float)), *d = NULL;
    int ok = h != NULL;
    for (int m = 0; m < count && ok; m++) ok = !qt_dequant_window(q[m], r0, nr, c0, nc, h + per * m);
    if (ok) d = dev_f32(h, per * count);
    free(h);
    return d;
}

static int load_ref(gpu_moe *g, const v4_weights *w, const v4_shard *sh, int l, char *err, size_t errlen)
{
    const v4_config *c = &w->cfg;
    const v4_layer_w *Lw = &w->layers[l];
    v4_moe_ref_w *r = &g->ref[l];
    const int E = c->n_routed_experts;
    r->dim = c->dim;
    r->inter = sh->ni;
    r->n_experts = E;
    r->topk = c->n_active;
    r->score_func = c->score_func == V4_SCORE_SOFTMAX ? 1 : c->score_func == V4_SCORE_SIGMOID ? 2 : 0;
    r->route_scale = c->route_scale;
    r->swiglu_limit = c->swiglu_limit;
    const qtensor **q = malloc((size_t)E * sizeof *q);
    if (!q) goto oom;
    float *gate = router_f32(&Lw->gate);
    if (!gate) { free(q); goto oom; }
    r->gate = dev_f32(gate, (size_t)E * c->dim);
    free(gate);
    if (Lw->gate_bias) r->bias = dev_f32(Lw->gate_bias, (size_t)E);
    if (Lw->tid2eid) {
        int32_t *d = NULL;
        const size_t bytes = (size_t)c->vocab_size * c->n_active * sizeof(int32_t);
        if (cudaMalloc((void **)&d, bytes) == cudaSuccess) cudaMemcpy(d, Lw->tid2eid, bytes, cudaMemcpyHostToDevice);
        r->tid2eid = d;
    }
    for (int e = 0; e < E; e++) q[e] = &Lw->experts[e].w1;
    r->w1 = dev_stack_part(q, E, sh->i0, sh->ni, 0, c->dim);
    for (int e = 0; e < E; e++) q[e] = &Lw->experts[e].w3;
    r->w3 = dev_stack_part(q, E, sh->i0, sh->ni, 0, c->dim);
    for (int e = 0; e < E; e++) q[e] = &Lw->experts[e].w2;
    r->w2 = dev_stack_part(q, E, 0, c->dim, sh->i0, sh->ni);
    free(q);
    if (c->n_shared_experts > 0 && Lw->shared.w1.data) {
        const qtensor *s1 = &Lw->shared.w1, *s3 = &Lw->shared.w3, *s2 = &Lw->shared.w2;
        r->shared_inter = sh->sni;
        r->s1 = dev_stack_part(&s1, 1, sh->si0, sh->sni, 0, c->dim);
        r->s3 = dev_stack_part(&s3, 1, sh->si0, sh->sni, 0, c->dim);
        r->s2 = dev_stack_part(&s2, 1, 0, c->dim, sh->si0, sh->sni);
        if (!r->s1 || !r->s3 || !r->s2) goto oom;
    }
    if (!r->gate || (Lw->gate_bias && !r->bias) || (Lw->tid2eid && !r->tid2eid) || !r->w1 || !r->w3 || !r->w2) goto oom;
    return 0;
oom:
    snprintf(err, errlen, "cuda backend: layer %d: out of GPU memory for the generic MoE's fp32 weights", l);
    return -1;
}

static void free_ref(v4_moe_ref_w *r)
{
    const void *p[] = {r->gate, r->bias, r->tid2eid, r->w1, r->w3, r->w2, r->s1, r->s3, r->s2};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (p[i]) cudaFree((void *)p[i]);
    memset(r, 0, sizeof *r);
}

int gpu_moe_load(gpu_moe *g, const v4_weights *w, const v4_shard *sh, int max_tokens, char *err, size_t errlen)
{
    const v4_config *cfg = &w->cfg;
    memset(g, 0, sizeof *g);
    g->sh = *sh;
    g->n_layers = cfg->n_layers;
    g->L = calloc((size_t)g->n_layers, sizeof *g->L);
    g->ref = calloc((size_t)g->n_layers, sizeof *g->ref);
    g->fast = calloc((size_t)g->n_layers, sizeof *g->fast);
    if (!g->L || !g->ref || !g->fast) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
    char why[256];
    const int fits = !gpu_moe_fast_fits(w, sh, why, sizeof why);
    quant_scratch qs = {0};
    int first = -1;
    for (int l = 0; l < g->n_layers; l++) {
        if (!w->layers[l].experts) {
            snprintf(err, errlen, "cuda backend: layer %d has no routed experts", l);
            qs_free(&qs);
            return -1;
        }
        if (fits) {
            if (load_layer(&g->L[l], w, sh, l, &qs, err, errlen)) { qs_free(&qs); return -1; }
            g->fast[l] = 1;
            if (first < 0) first = l;
        } else if (load_ref(g, w, sh, l, err, errlen)) {
            qs_free(&qs);
            return -1;
        }
    }
    qs_free(&qs);
    if (first >= 0) {
        if (moe_cuda_ws_init(&g->W, &g->L[first], max_tokens)) {
            moe_cuda_ws_free(&g->W);
            snprintf(err, errlen, "cuda backend: MoE workspace for %d tokens failed (see the line above)", max_tokens);
            return -1;
        }
        g->ws_ok = 1;
    }
    return 0;
}

int gpu_moe_add_shared_bf16(gpu_moe *g, const v4_weights *w, size_t reserve, char *err, size_t errlen)
{
    return add_shared_bf16(g->L, g->fast, g->n_layers, w, &g->sh, reserve, err, errlen);
}

void gpu_moe_free(gpu_moe *g)
{
    for (int l = 0; l < g->n_layers; l++) {
        if (g->fast && g->fast[l]) moe_cuda_layer_free(&g->L[l]);
        if (g->ref) free_ref(&g->ref[l]);
    }
    if (g->ws_ok) moe_cuda_ws_free(&g->W);
    free(g->L);
    free(g->ref);
    free(g->fast);
    memset(g, 0, sizeof *g);
}

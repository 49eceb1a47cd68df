/* backend_cuda.c — the "cuda" engine backend (hybrid): every layer's MoE (router + routed experts +
 * shared expert) runs on the GPU with the MoE kernels (moe_cuda.h, kernels/sm90); embedding, mHC,
 * attention, per-sequence state and the head stay on the CPU reference (engine/cpu/) through its
 * MoE hook (sl_backend_cpu_create_hooked in backend.h).
 *
 * Open (sl_backend_cuda_create) uploads and repacks every layer's MoE weights once:
 *   - routed experts stored as NVFP4 (ModelOpt) or MXFP4 (DeepSeek) are repacked as loaded (exact);
 *   - any other expert format (F32/BF16/F16/FP8) is quantised to NVFP4 at load on the GPU with the
 *     CUDA quantiser (ModelOpt rounding: lossy, like --quantize-experts nvfp4);
 *   - a shared expert stored as FP8 (128x128 block scales) is used as is; any other format is
 *     quantised on the host to FP8 E4M3 with one fp32 scale per 128x128 block (amax / 448: lossy);
 *   - the router weight is uploaded in fp32, the bias and hash table (tid2eid) as stored.
 * Shapes the kernels accept (kernels/moe_kernels.h): hidden a multiple of 256 (router) and <= 8192,
 * moe_intermediate_size a multiple of 128 and <= 8192, <= 512 experts, top-k <= 32, shared expert as
 * wide as a routed one; a model outside that fails to open with one line naming the constraint.
 * No CUDA device at open -> one line, NULL.
 *
 * Per step and layer: the MoE inputs (fp32, host) are rounded to bf16 into a pinned buffer, copied
 * to the GPU, the layer's launch sequence is enqueued on the backend's stream, the fp32 output is
 * copied back and the stream synchronised: that copy-back is the only host sync. Every buffer is
 * sized at open for SL_CUDA_MOE_MAX_TOKENS tokens (env SLUICE_CUDA_MOE_TOKENS overrides, 1..65536);
 * a step with more tokens runs its MoE in chunks of that many (the MoE is per token), so a step
 * never allocates. Last at open, where it fits, each layer's shared expert also in bf16, so steps of >= 256 MoE
 * tokens run it as GEMMs (add_shared_bf16; env SLUICE_CUDA_SHARED_BF16 0 / 1 / auto).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "../backend.h"
#include "moe_cuda.h"
#include "moe_kernels.h"

#define SL_CUDA_MOE_MAX_TOKENS 2048

typedef struct {
    sl_backend *cpu;          /* the CPU reference with our MoE hook */
    int n_layers, dim, cap;
    moe_cuda_layer *L;        /* [n_layers] */
    int *on_gpu;              /* [n_layers]: 0 = layer without routed experts (CPU computes it) */
    moe_cuda_ws W;            /* one workspace for every layer (same shapes) */
    int ws_ok;
    cudaStream_t st;
    uint16_t *hx;             /* pinned [cap][dim] bf16 inputs */
    float *hout;              /* pinned [cap][dim] outputs */
    int32_t *htok;            /* pinned [cap] token ids (hash layers) */
    uint16_t *dx;
    float *dout;
    int32_t *dtok;
} cuda_impl;

static int moe_hook(void *ctx, int l, int n, const int32_t *tok, const float *xn, float *f)
{
    cuda_impl *c = ctx;
    if (l < 0 || l >= c->n_layers) return -1;
    if (!c->on_gpu[l]) return 1;
    const moe_cuda_layer *L = &c->L[l];
    const int hash = L->s.hash;
    for (int t0 = 0; t0 < n; t0 += c->cap) {
        const int m = n - t0 < c->cap ? n - t0 : c->cap;
        const size_t cnt = (size_t)m * c->dim;
        const float *xs = xn + (size_t)t0 * c->dim;
        for (size_t i = 0; i < cnt; i++) c->hx[i] = qt_f32_to_bf16(xs[i]);
        cudaError_t e = cudaMemcpyAsync(c->dx, c->hx, cnt * sizeof(uint16_t), cudaMemcpyHostToDevice, c->st);
        if (e == cudaSuccess && hash) {
            memcpy(c->htok, tok + t0, (size_t)m * sizeof(int32_t));
            e = cudaMemcpyAsync(c->dtok, c->htok, (size_t)m * sizeof(int32_t), cudaMemcpyHostToDevice, c->st);
        }
        if (e != cudaSuccess) {
            fprintf(stderr, "cuda backend: layer %d: input copy failed: %s\n", l, cudaGetErrorString(e));
            return -1;
        }
        if (moe_cuda_forward(L, &c->W, c->dx, hash ? c->dtok : NULL, m, c->dout, c->st)) return -1;
        e = cudaMemcpyAsync(c->hout, c->dout, cnt * sizeof(float), cudaMemcpyDeviceToHost, c->st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->st);
        if (e != cudaSuccess) {
            fprintf(stderr, "cuda backend: layer %d: MoE on the GPU failed: %s\n", l, cudaGetErrorString(e));
            return -1;
        }
        memcpy(f + (size_t)t0 * c->dim, c->hout, cnt * sizeof(float));
    }
    return 0;
}

static void impl_free(cuda_impl *c)
{
    if (!c) return;
    if (c->cpu) c->cpu->ops->destroy(c->cpu);
    if (c->L)
        for (int l = 0; l < c->n_layers; l++) moe_cuda_layer_free(&c->L[l]);
    if (c->ws_ok) moe_cuda_ws_free(&c->W);
    if (c->hx) cudaFreeHost(c->hx);
    if (c->hout) cudaFreeHost(c->hout);
    if (c->htok) cudaFreeHost(c->htok);
    if (c->dx) cudaFree(c->dx);
    if (c->dout) cudaFree(c->dout);
    if (c->dtok) cudaFree(c->dtok);
    if (c->st) cudaStreamDestroy(c->st);
    free(c->L);
    free(c->on_gpu);
    free(c);
}

static int cuda_forward(sl_backend *be, sl_seq_span *spans, int n_spans, char *err, size_t errlen)
{
    cuda_impl *c = be->impl;
    return c->cpu->ops->forward(c->cpu, spans, n_spans, err, errlen);
}

static void cuda_destroy(sl_backend *be)
{
    if (!be) return;
    impl_free(be->impl);
    free(be);
}

static const sl_backend_ops cuda_ops = {"cuda", cuda_forward, cuda_destroy};

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
    memset(q, 0, sizeof *q);
}

static int qs_init(quant_scratch *q, int H, int I)
{
    const size_t nk = (size_t)H * I;
    memset(q, 0, sizeof *q);
    if (!(q->host = malloc(nk * sizeof(float)))) return -1;
    if (cudaMalloc((void **)&q->dw, nk * sizeof(float)) != cudaSuccess) return -1;
    for (int m = 0; m < 3; m++)
        if (cudaMalloc((void **)&q->dq[m], nk / 2) != cudaSuccess || cudaMalloc((void **)&q->ds[m], nk / 16) != cudaSuccess)
            return -1;
    return cudaMalloc((void **)&q->d2, 3 * sizeof(float)) == cudaSuccess ? 0 : -1;
}

/* Expert e of a layer whose experts are not FP4: dequantise on the host, NVFP4-quantise on the GPU. */
static int quantise_expert(moe_cuda_layer *L, int e, const v4_expert_w *x, quant_scratch *q)
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
    return moe_cuda_set_expert_dev(L, e, (const uint8_t *const *)q->dq, (const uint8_t *const *)q->ds, s2);
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

static int load_shared(moe_cuda_layer *L, const v4_expert_w *s)
{
    const qtensor *w[3] = {&s->w1, &s->w3, &s->w2};
    if (w[0]->fmt == QT_FP8_B128 && w[1]->fmt == QT_FP8_B128 && w[2]->fmt == QT_FP8_B128)
        return moe_cuda_set_shared(L, w[0], w[1], w[2]);
    qtensor t[3] = {{0}};
    int rc = -1;
    if (!fp8_from(w[0], &t[0]) && !fp8_from(w[1], &t[1]) && !fp8_from(w[2], &t[2]))
        rc = moe_cuda_set_shared(L, &t[0], &t[1], &t[2]);
    for (int m = 0; m < 3; m++) { free((void *)t[m].data); free((void *)t[m].scale); }
    return rc;
}

static float *router_f32(const qtensor *g)
{
    float *o = malloc((size_t)g->rows * g->cols * sizeof(float));
    if (o)
        for (int r = 0; r < g->rows; r++) qt_dequant_row(g, r, o + (size_t)r * g->cols);
    return o;
}

static int load_layer(cuda_impl *c, const v4_weights *w, int l, quant_scratch *qs, char *err, size_t errlen)
{
    const v4_config *cfg = &w->cfg;
    const v4_layer_w *Lw = &w->layers[l];
    const int E = cfg->n_routed_experts;
    int keep;
    const qt_format fmt = layer_fp4(Lw, E, &keep);
    moe_cuda_shape s = {
        .n_experts = E, .hidden = cfg->dim, .inter = cfg->moe_inter, .topk = cfg->n_active,
        .score_func = cfg->score_func == V4_SCORE_SOFTMAX ? MOE_SCORE_SOFTMAX
                      : cfg->score_func == V4_SCORE_SIGMOID ? MOE_SCORE_SIGMOID : MOE_SCORE_SQRTSOFTPLUS,
        .route_scale = cfg->route_scale, .swiglu_limit = cfg->swiglu_limit,
        .hash = Lw->tid2eid != NULL, .vocab = cfg->vocab_size,
        .has_shared = cfg->n_shared_experts > 0 && Lw->shared.w1.data != NULL,
        .fp4_fmt = fmt,
    };
    moe_cuda_layer *L = &c->L[l];
    if (moe_cuda_layer_init(L, &s)) {
        snprintf(err, errlen, "cuda backend: layer %d: cannot set up the GPU MoE (see the line above)", l);
        return -1;
    }
    float *gate = router_f32(&Lw->gate);
    if (!gate) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
    int rc = moe_cuda_set_router(L, gate, Lw->gate_bias, Lw->tid2eid);
    free(gate);
    if (rc) { snprintf(err, errlen, "cuda backend: layer %d: router upload failed", l); return -1; }
    if (!keep && !qs->host && qs_init(qs, cfg->dim, cfg->moe_inter)) {
        snprintf(err, errlen, "cuda backend: out of memory for the load-time NVFP4 quantiser");
        return -1;
    }
    for (int e = 0; e < E; e++) {
        const v4_expert_w *x = &Lw->experts[e];
        if (keep ? moe_cuda_set_expert(L, e, &x->w1, &x->w3, &x->w2) : quantise_expert(L, e, x, qs)) {
            snprintf(err, errlen, "cuda backend: layer %d expert %d: upload to the GPU failed", l, e);
            return -1;
        }
    }
    if (s.has_shared && load_shared(L, &Lw->shared)) {
        snprintf(err, errlen, "cuda backend: layer %d: shared expert upload failed", l);
        return -1;
    }
    if (L->clamped_scales)
        fprintf(stderr, "cuda backend: layer %d: %d MXFP4 block scales clamped (> 31 binades above the smallest)\n", l,
                L->clamped_scales);
    c->on_gpu[l] = 1;
    return 0;
}

/* v41 (bench/NOTES.md v41 (2)): the shared expert's bf16 copy (moe_cuda_alloc_shared_bf16), with which steps of at least
 * moe_cuda_ws.shared_gemm_min_t (256) MoE tokens run it as two bf16 GEMMs (moe_shared_gemms, the path sluice-bench
 * measures from 256) instead of the FP8 kernels; 2 bytes per weight beside the FP8 copy (+50 MB per V4-Flash layer).
 * Added last, after every buffer the backend needs, layer by layer while the GPU keeps SHARED_BF16_RESERVE (or 1/20
 * of its memory, the larger) free. SLUICE_CUDA_SHARED_BF16: 0 never, 1 every layer (an open error if one does not
 * fit), unset or "auto": as far as it fits. */
#define SHARED_BF16_RESERVE ((size_t)1 << 30)

static int add_shared_bf16(cuda_impl *c, const v4_weights *w, char *err, size_t errlen)
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
    for (int l = 0; l < c->n_layers; l++) n += c->on_gpu[l] && c->L[l].s.has_shared;
    for (int l = 0; l < c->n_layers; l++) {
        moe_cuda_layer *L = &c->L[l];
        if (!c->on_gpu[l] || !L->s.has_shared) continue;
        /* the copy, and the FP8 upload moe_cuda_set_shared stages it from */
        const size_t need = (size_t)9 * L->s.inter * L->s.hidden;
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) fr = tot = 0;
        const size_t reserve = tot / 20 > SHARED_BF16_RESERVE ? tot / 20 : SHARED_BF16_RESERVE;
        if (fr < need + reserve) {
            if (mode < 0) break;
            snprintf(err, errlen, "cuda backend: layer %d: no GPU memory for the shared expert's bf16 copy (%zu MiB free; "
                     "SLUICE_CUDA_SHARED_BF16=1)", l, fr >> 20);
            return -1;
        }
        if (moe_cuda_alloc_shared_bf16(L) || load_shared(L, &w->layers[l].shared)) {
            snprintf(err, errlen, "cuda backend: layer %d: the shared expert's bf16 copy failed (see the line above)", l);
            return -1;
        }
        done++;
    }
    if (done < n)
        fprintf(stderr, "cuda backend: the shared expert's bf16 copy fits %d of %d layers (the GPU keeps 1/20 of its "
                "memory free); the others run it on the FP8 kernels at every batch\n", done, n);
    return 0;
}

/* One line naming the first constraint of the GPU MoE kernels the model does not meet; 0 = fits. */
static int check_shape(const v4_weights *w, char *err, size_t errlen)
{
    const v4_config *c = &w->cfg;
    const char *k = "the GPU MoE kernels (kernels/moe_kernels.h)";
    if (c->dim % 256 || c->dim > 8192) {
        snprintf(err, errlen, "cuda backend: hidden_size %d does not fit %s: it must be a multiple of 256 and <= 8192",
                 c->dim, k);
        return -1;
    }
    if (c->moe_inter % 128 || c->moe_inter > 8192) {
        snprintf(err, errlen, "cuda backend: moe_intermediate_size %d does not fit %s: it must be a multiple of 128 and <= 8192",
                 c->moe_inter, k);
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

sl_backend *sl_backend_cuda_create(const v4_weights *w, v4_state_pool *pool, char *err, size_t errlen)
{
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev < 1) {
        snprintf(err, errlen, "cuda backend: no CUDA device available (%s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return NULL;
    }
    if (check_shape(w, err, errlen)) return NULL;
    const v4_config *cfg = &w->cfg;
    sl_backend *be = calloc(1, sizeof *be);
    cuda_impl *c = calloc(1, sizeof *c);
    quant_scratch qs = {0};
    if (!be || !c) goto oom;
    c->n_layers = cfg->n_layers;
    c->dim = cfg->dim;
    c->cap = SL_CUDA_MOE_MAX_TOKENS;
    const char *ev = getenv("SLUICE_CUDA_MOE_TOKENS");
    if (ev && *ev) {
        char *end;
        long v = strtol(ev, &end, 10);
        if (*end || v < 1 || v > 65536) {
            snprintf(err, errlen, "cuda backend: SLUICE_CUDA_MOE_TOKENS='%s' is not a number in 1..65536", ev);
            goto fail;
        }
        c->cap = (int)v;
    }
    c->L = calloc((size_t)c->n_layers, sizeof *c->L);
    c->on_gpu = calloc((size_t)c->n_layers, sizeof *c->on_gpu);
    if (!c->L || !c->on_gpu) goto oom;
    if ((ce = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: cannot use the CUDA device (%s)", cudaGetErrorString(ce));
        goto fail;
    }
    int first = -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (!w->layers[l].experts) continue;
        if (load_layer(c, w, l, &qs, err, errlen)) goto fail;
        if (first < 0) first = l;
    }
    qs_free(&qs);
    if (first >= 0) {
        if (moe_cuda_ws_init(&c->W, &c->L[first], c->cap)) {
            moe_cuda_ws_free(&c->W);
            snprintf(err, errlen, "cuda backend: GPU workspace for %d tokens failed (see the line above)", c->cap);
            goto fail;
        }
        c->ws_ok = 1;
    }
    const size_t cnt = (size_t)c->cap * c->dim;
    if (cudaHostAlloc((void **)&c->hx, cnt * sizeof(uint16_t), cudaHostAllocDefault) != cudaSuccess ||
        cudaHostAlloc((void **)&c->hout, cnt * sizeof(float), cudaHostAllocDefault) != cudaSuccess ||
        cudaHostAlloc((void **)&c->htok, (size_t)c->cap * sizeof(int32_t), cudaHostAllocDefault) != cudaSuccess ||
        cudaMalloc((void **)&c->dx, cnt * sizeof(uint16_t)) != cudaSuccess ||
        cudaMalloc((void **)&c->dout, cnt * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&c->dtok, (size_t)c->cap * sizeof(int32_t)) != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: out of host-pinned or GPU memory for %d-token staging buffers", c->cap);
        goto fail;
    }
    if (add_shared_bf16(c, w, err, errlen)) goto fail;
    if ((ce = cudaDeviceSynchronize()) != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: loading the MoE weights failed on the GPU (%s)", cudaGetErrorString(ce));
        goto fail;
    }
    c->cpu = sl_backend_cpu_create_hooked(w, pool, 0, moe_hook, c, err, errlen);
    if (!c->cpu) goto fail;
    be->ops = &cuda_ops;
    be->w = w;
    be->pool = pool;
    be->impl = c;
    return be;
oom:
    snprintf(err, errlen, "cuda backend: out of memory");
fail:
    qs_free(&qs);
    impl_free(c);
    free(be);
    return NULL;
}

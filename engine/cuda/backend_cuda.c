/* backend_cuda.c — the "cuda" engine backend: the whole V4 forward on the GPU (V4_SPEC 2), with the
 * per-sequence state in device memory.
 *
 * Open uploads every weight once: dense projections as the kernels take them (dense_gemm.h: FP8
 * E4M3 with 128x128 block scales as stored, every other format converted to bf16), the projections of one
 * input stacked into one weight (wq_a + wkv; the compressors' and the indexer's), the small fp32
 * parameters (norms, mHC, ape, sinks), the embedding (bf16 if stored so, else fp32), the head, each
 * layer's MoE (moe_load.c), RoPE frequency tables. It then takes the state arenas and registers them
 * with the scheduler's pool (v4_state_store): one fixed part per running sequence (slots) and pages
 * of compressed entries, sized from the state budget and what the GPU has left.
 *
 * A step (forward) uploads the step's layout once (token ids, positions, spans, block tables), then
 * enqueues every layer: mHC pre (with the previous sublayer's mHC post folded in) + RMSNorm, the
 * stacked projections, the norms and RoPE (one launch for q_norm and kv, one for the heads), the
 * compressors and the indexer (CSA), sparse attention over the window + compressed entries (its output
 * de-rotated, bf16), the ring store, the grouped output projection (one launch, bf16 out), wo_b; mHC
 * pre, MoE; then the last post, the head's collapse, the final norm and the LM head for the rows that
 * want a token or logits. Rows that sample do so on the device (v4_sample); only token ids, and logits
 * where asked for, come back, with the step's one sync. Activations feeding a projection are bf16,
 * everything else fp32. A step with more than `cap` tokens runs as consecutive sub-steps of at most
 * cap tokens (splitting a span is the same as chunked prefill), so every buffer is sized once at open.
 *
 * Several GPUs (engine.devices): one cuda_impl per rank, rank 0 the backend's, holding the others; each rank loads its
 * share (engine/shard.h: heads and every expert's units; the rest and every sequence's state whole) and runs every
 * sublayer on the same inputs, its output a partial sum that one all-reduce per sublayer completes (v4_allreduce.cu:
 * one-shot over peer access between GPUs, in place where every rank shares one GPU and one stream). Rank 0 builds
 * the step's layout (each rank gets a copy), owns the graphs (one per stream), runs the head and sampling, and checks
 * after the step that no all-reduce gave up waiting for a GPU.
 */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"
#include "dense_gemm.h"
#include "sampler.h"

#define STEP_TOKENS 512          /* tokens per sub-step (buffers are sized for this many) */
#define HEAD_ROWS 256            /* logits rows per head launch (>= GRAPH_MAX_BATCH) */
#define INDEX_SCRATCH_FLOATS ((size_t)64 << 20)   /* indexer scores scratch: 256 MB */
#define SAMPLE_HIST_INTS ((size_t)4 << 20)   /* history tokens of one step's penalised rows on the device */
#define ATT_SCRATCH_ROWS 128     /* rows of window + top-k keys one attention launch merges (v4_attention) */
#define MAX_SLOTS 1024
#define GRAPH_MAX_BATCH 256      /* decode steps up to this many sequences replay a CUDA graph */
#define MAX_GRAPHS 32            /* captured (batch, context) buckets kept */
#define PROF_MARKS 4096          /* profile timestamps per step */
#define PROF_CAL 16              /* back-to-back timestamps that measure one timestamp's own cost */

#define AR_TIMEOUT_NS 10000000000ull   /* an all-reduce waits this long for a peer GPU before failing the step */

typedef struct {
    int batch, ctx;
    cudaGraphExec_t exec[SL_MAX_RANKS];     /* one per stream: rank 0's, and each rank's on its own GPU */
} cu_graph;

/* A launched decode step (cuda_launch) until collected: the pinned buffers its layout and sampling went through (the
 * host fills the next step's in the other flight's meanwhile), the event after its results' copies, its spans. */
typedef struct {
    int32_t *hmeta, *htok;
    float *hlp;
    v4_sample_req *hsreq;
    cudaEvent_t done;
    sl_seq_span *spans;
    int n;
} cu_flight;

typedef struct {
    dense_weight wq_b;                      /* the rank's heads' rows; CSA: then the indexer's wq_b (one input) */
    dense_weight wo_a, wo_b;
    dense_weight wqkv;                      /* [wq_a; wkv] */
    dense_weight wcmp;                      /* [compressor wkv; wgate; (CSA) indexer compressor wkv; wgate; weights_proj] */
    int n_cmp;                              /* wcmp's rows */
    float *q_norm, *kv_norm, *attn_sink, *attn_norm, *ffn_norm;
    float *hc_attn_fn, *hc_attn_base, *hc_attn_scale, *hc_ffn_fn, *hc_ffn_base, *hc_ffn_scale;
    float *c_ape, *c_norm, *i_ape, *i_norm;
    int ratio;
    size_t ring_off, cst_off, ist_off;      /* in a slot */
    size_t page_off, ipage_off;             /* in a page */
} cu_layer;

enum { BR_COMB, BR_COMPRESS, N_BRANCH };   /* the step's branches beside the main stream */

typedef struct cuda_impl {
    const v4_weights *w;
    v4_state_pool *pool;
    cudaStream_t st;
    /* the split across GPUs (engine/shard.h): one rank, the whole model, on one GPU */
    v4_shard sh;
    int dev;                                /* the rank's CUDA device */
    int own_stream;                         /* 0: st is rank 0's (every rank on one GPU, one stream) */
    /* work beside st (branch_fork, branch_join): each sublayer's mHC post and comb; a layer's compressor path */
    cudaStream_t side[N_BRANCH];
    cudaEvent_t fork_ev[N_BRANCH], join_ev[N_BRANCH];
    int open[N_BRANCH];                     /* branch work st has not waited for yet */
    struct cuda_impl *rk[SL_MAX_RANKS];     /* rank 0: every rank, rank 0 first */
    int n_ranks;                            /* rank 0: how many */
    float *part[2], *sum[2];                /* where each sublayer (attention, MoE) writes its output, and where the
                                               ranks' sum of it lands (the same buffer but with GPUs of their own) */
    const float *flast;                     /* the last sublayer's summed output (the head's pending mHC post) */
    float *f2, *fsum;                       /* GPUs of their own: the MoE's output, the sums */
    int ar_peer;                            /* the ranks' GPUs are distinct (v4_allreduce_peer) */
    unsigned *ar_inbox, *ar_epoch;          /* v4_ar_peer's flags and launch counters on this rank's GPU */
    unsigned *ar_fault;                     /* rank 0: host-mapped word a timed-out all-reduce sets */
    char broken[160];                       /* rank 0: non-empty once a GPU hangs (ar_reset): every step fails so */
    cu_layer *L;
    gpu_moe moe;
    void *embed;
    int embed_bf16;
    dense_weight head;
    float *hc_head_fn, *hc_head_base, *hc_head_scale, *norm;
    double *freq_main, *freq_comp;
    /* state */
    v4_arena ar;
    int n_slots, n_pages;
    int *slot_free, n_slot_free;
    v4_state_store store;
    /* step buffers (cap tokens) */
    int cap, max_blocks;
    int32_t *dmeta;                         /* device step layout (pinned: the flights' hmeta) */
    size_t meta_ints;
    float *X, *f, *post, *comb, *qkv, *q, *cmp, *scores, *logits, *hlogits;
    uint16_t *xn, *qr_b, *q_b, *kv_b, *iq_b, *o_b, *u_b, *y_b;
    int32_t *sel;
    size_t score_floats;
    float *att_scratch;                     /* v4_attention's split partials */
    float *hc_scratch;                      /* v4_hc_pre's chunk sums */
    /* sampling (v4_sample) of a head launch's rows */
    v4_sample_req *dsreq;                   /* (the pinned requests and results: the flights') */
    int32_t *hhist, *dhist, *dtok;
    float *hlp, *dlp, *probs;
    uint32_t *marks;
    int row_piece[HEAD_ROWS], row_sample[HEAD_ROWS];
    sl_sampler smp;                         /* rows sampled on the host (histories too long for dhist) */
    /* pinned step buffers: a step run by forward uses flight 0's; launched steps (cuda_launch) alternate */
    cu_flight fl[2];
    int fl0, n_fl;                          /* launched steps not collected: n_fl, the oldest fl[fl0] */
    size_t att_scratch_floats;
    size_t lrows_at;                        /* ints from the layout's start to its logits rows */
    int use_graphs;
    int deterministic;                      /* sl_backend_cuda_set_deterministic */
    int index_fp8;                          /* the indexer's keys in FP8 rows (sl_cuda_opts.index_fp8) */
    int kv_fp8;                             /* the attention's keys in FP8 KV rows (sl_cuda_opts.kv_fp8) */
    size_t kv_rb;                           /* bytes of one key row (v4_kv_row_bytes) */
    int n_sms;                              /* the GPU's multiprocessors */
    double mem_fraction;                    /* of the GPU's memory the engine may take */
    int sublayers;                          /* sl_backend.sublayers of the step in flight */
    size_t mem_used, mem_total;             /* cuda_memory's last answer, at mem_at (monotonic s) */
    double mem_at;
    cu_graph graphs[MAX_GRAPHS];
    int n_graphs;
    /* step profile (sl_backend_cuda_profile): timestamps between the launches of a freshly captured step */
    double *prof_ms;                        /* NULL: off; else [SL_FAM_N] ms of the last profiled step */
    uint64_t *prof_ts, *prof_hts;           /* device / host timestamps, PROF_MARKS each */
    v4_step last_S;                         /* the layout and largest position of the last step enqueued (its */
    int last_max_t;                         /* device arrays stay valid until the next step's upload) */
    int prof_fam[PROF_MARKS], n_marks;
    const char *prof_what[PROF_MARKS];      /* each stamp's launch, as LAUNCH names it */
    double prof_ns[PROF_MARKS];             /* the last profiled step: each launch's time, stamp cost removed */
    int prof_launches;
} cuda_impl;

/* ------------------------------------------------------------------------------ errors */
#define CK(call, what)                                                                                     \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            snprintf(err, errlen, "cuda backend: %s failed: %s", what, cudaGetErrorString(e_));            \
            return -1;                                                                                      \
        }                                                                                                   \
    } while (0)

/* A profiled step writes a GPU timestamp after each launch (a one-thread kernel), tagged with the launch's family;
 * the time between consecutive stamps, less one stamp's own cost, is the family's (the launch gaps included). Off:
 * nothing. */
static void mark(cuda_impl *c, int fam, const char *what)
{
    if (!c->prof_ms || c->n_marks >= PROF_MARKS) return;
    if (v4_stamp(c->prof_ts + c->n_marks, c->st) != cudaSuccess) return;
    c->prof_what[c->n_marks] = what;
    c->prof_fam[c->n_marks++] = fam;
}

/* Enqueue a launch of family `fam`; "what" names it in the error. */
#define LAUNCH(fam, call, what)                                                                            \
    do {                                                                                                    \
        CK(call, what);                                                                                     \
        mark(c, fam, what);                                                                                  \
    } while (0)

const char *const sl_cuda_family_names[SL_FAM_N] = {"mhc_norms", "dense_gemm", "compressors", "indexer", "attention",
                                                    "moe", "head", "collective"};

/* --------------------------------------------------------------------------- load time */
static float *up_f32(const float *h, size_t n)
{
    float *d = NULL;
    if (!h || !n) return NULL;
    if (cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* Dense weight from qtensors stacked by rows (projections of one input, one launch): FP8 128x128 as stored (scales
 * to fp32) when every part is, with whole 128-row blocks; anything else as bf16. */
static int up_dense_cat(dense_weight *dw, const qtensor *const *q, int nq, char *err, size_t errlen, const char *name,
                        int l)
{
    int n = 0, fp8 = 1;
    const int k = q[0]->cols;
    for (int i = 0; i < nq; i++) {
        if (q[i]->cols != k) {
            snprintf(err, errlen, "cuda backend: layer %d %s: parts of %d and %d inputs", l, name, k, q[i]->cols);
            return -1;
        }
        fp8 &= q[i]->fmt == QT_FP8_B128 && (i == nq - 1 || q[i]->rows % 128 == 0);
        n += q[i]->rows;
    }
    memset(dw, 0, sizeof *dw);
    void *dsrc = NULL;
    float *dsc = NULL;
    int fmt, rc = -1;
    cudaError_t e = cudaSuccess;
    if (fp8) {
        const int bk = (k + 127) / 128;
        float *sc = malloc((size_t)((n + 127) / 128) * bk * sizeof(float));
        uint8_t *data = malloc((size_t)n * k);
        if (!sc || !data) { free(sc); free(data); goto oom; }
        size_t r0 = 0, b0 = 0;
        for (int p = 0; p < nq; p++) {
            const int bn = (q[p]->rows + 127) / 128;
            memcpy(data + r0 * k, q[p]->data, (size_t)q[p]->rows * k);
            for (int i = 0; i < bn * bk; i++)
                sc[b0 + i] = q[p]->scale_is_f32 ? ((const float *)q[p]->scale)[i]
                                                : qt_e8m0_to_f32(((const uint8_t *)q[p]->scale)[i]);
            r0 += (size_t)q[p]->rows;
            b0 += (size_t)bn * bk;
        }
        fmt = DENSE_FP8_B128;
        if ((e = cudaMalloc(&dsrc, (size_t)n * k)) == cudaSuccess &&
            (e = cudaMemcpy(dsrc, data, (size_t)n * k, cudaMemcpyHostToDevice)) == cudaSuccess)
            dsc = up_f32(sc, b0);
        free(sc);
        free(data);
        if (e == cudaSuccess && !dsc) e = cudaErrorMemoryAllocation;
    } else {
        uint16_t *h = malloc((size_t)n * k * sizeof(uint16_t));
        float *row = malloc((size_t)k * sizeof(float));
        if (!h || !row) { free(h); free(row); goto oom; }
        size_t r0 = 0;
        for (int p = 0; p < nq; p++)
            for (int r = 0; r < q[p]->rows; r++, r0++) {
                qt_dequant_row(q[p], r, row);
                for (int c = 0; c < k; c++) h[r0 * k + c] = qt_f32_to_bf16(row[c]);
            }
        free(row);
        fmt = DENSE_BF16;
        if ((e = cudaMalloc(&dsrc, (size_t)n * k * 2)) == cudaSuccess)
            e = cudaMemcpy(dsrc, h, (size_t)n * k * 2, cudaMemcpyHostToDevice);
        free(h);
    }
    if (e == cudaSuccess) e = dense_weight_init(dw, fmt, n, k, dsrc, dsc, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        snprintf(err, errlen, "cuda backend: layer %d %s [%d x %d]: upload failed: %s", l, name, n, k, cudaGetErrorString(e));
    else
        rc = 0;
    if (dsrc) cudaFree(dsrc);
    if (dsc) cudaFree(dsc);
    return rc;
oom:
    snprintf(err, errlen, "cuda backend: out of host memory converting layer %d %s", l, name);
    return -1;
}

static int up_dense(dense_weight *dw, const qtensor *q, char *err, size_t errlen, const char *name, int l)
{
    return up_dense_cat(dw, &q, 1, err, errlen, name, l);
}

/* The rank's window (rows [r0, r0+nr) x cols [c0, c0+nc)) of a dense weight, stacked above `below` (a weight of the
 * same inputs, or NULL): the whole weight for one rank; in its own format where the window falls on the format's
 * blocks (qt_slice), else dequantised (the upload makes it bf16). */
static int up_dense_part(dense_weight *dw, const qtensor *q, int r0, int nr, int c0, int nc, const qtensor *below,
                         char *err, size_t errlen, const char *name, int l)
{
    qtensor part = *q;   /* a view: freeing it frees nothing of q's */
    part.owned = NULL;
    part.owned_scale = NULL;
    if ((nr != q->rows || nc != q->cols) && qt_slice(q, r0, nr, c0, nc, &part)) {
        float *f = malloc((size_t)nr * nc * sizeof(float));
        if (!f || qt_dequant_window(q, r0, nr, c0, nc, f)) {
            free(f);
            snprintf(err, errlen, "cuda backend: out of host memory cutting layer %d %s", l, name);
            return -1;
        }
        part = (qtensor){.fmt = QT_F32, .rows = nr, .cols = nc, .data = f, .owned = f, .scale2 = 1.0f};
    }
    const qtensor *parts[2] = {&part, below};
    const int rc = up_dense_cat(dw, parts, below ? 2 : 1, err, errlen, name, l);
    qt_free(&part);
    return rc;
}

static int load_layer(cuda_impl *c, int l, char *err, size_t errlen)
{
    const v4_config *cfg = &c->w->cfg;
    const v4_layer_w *W = &c->w->layers[l];
    cu_layer *L = &c->L[l];
    const int hc = cfg->hc_mult, dim = cfg->dim, nmix = (2 + hc) * hc, hd = cfg->head_dim, ol = cfg->o_lora_rank;
    const v4_shard *sh = &c->sh;   /* the rank's heads: wq_b's rows, the sinks, wo_a's groups, wo_b's columns */
    L->ratio = cfg->compress_ratio[l];
    const qtensor *qkv[2] = {&W->wq_a, &W->wkv};
    const int csa = L->ratio == 4;   /* the indexer's wq_b reads wq_b's input: one launch */
    if (up_dense_cat(&L->wqkv, qkv, 2, err, errlen, "wq_a + wkv", l) ||
        up_dense_part(&L->wq_b, &W->wq_b, sh->h0 * hd, sh->nh * hd, 0, W->wq_b.cols, csa ? &W->iwq_b : NULL, err,
                      errlen, csa ? "wq_b + indexer wq_b" : "wq_b", l) ||
        up_dense_part(&L->wo_a, &W->wo_a, sh->g0 * ol, sh->ng * ol, 0, W->wo_a.cols, NULL, err, errlen, "wo_a", l) ||
        up_dense_part(&L->wo_b, &W->wo_b, 0, W->wo_b.rows, sh->g0 * ol, sh->ng * ol, NULL, err, errlen, "wo_b", l))
        return -1;
    L->q_norm = up_f32(W->q_norm, (size_t)cfg->q_lora_rank);
    L->kv_norm = up_f32(W->kv_norm, (size_t)hd);
    L->attn_sink = up_f32(W->attn_sink + sh->h0, (size_t)sh->nh);
    L->attn_norm = up_f32(W->attn_norm, (size_t)dim);
    L->ffn_norm = up_f32(W->ffn_norm, (size_t)dim);
    L->hc_attn_fn = up_f32(W->hc_attn_fn, (size_t)nmix * hc * dim);
    L->hc_attn_base = up_f32(W->hc_attn_base, (size_t)nmix);
    L->hc_attn_scale = up_f32(W->hc_attn_scale, 3);
    L->hc_ffn_fn = up_f32(W->hc_ffn_fn, (size_t)nmix * hc * dim);
    L->hc_ffn_base = up_f32(W->hc_ffn_base, (size_t)nmix);
    L->hc_ffn_scale = up_f32(W->hc_ffn_scale, 3);
    if (!L->q_norm || !L->kv_norm || !L->attn_sink || !L->attn_norm || !L->ffn_norm || !L->hc_attn_fn ||
        !L->hc_attn_base || !L->hc_attn_scale || !L->hc_ffn_fn || !L->hc_ffn_base || !L->hc_ffn_scale)
        goto oom;
    if (L->ratio > 0) {
        const int coff = L->ratio == 4 ? 2 : 1;
        const qtensor *cmp[5] = {&W->comp.wkv, &W->comp.wgate, &W->icomp.wkv, &W->icomp.wgate, &W->iweights};
        const int np = L->ratio == 4 ? 5 : 2;
        if (up_dense_cat(&L->wcmp, cmp, np, err, errlen, "compressor projections", l)) return -1;
        L->n_cmp = L->wcmp.n;
        L->c_ape = up_f32(W->comp.ape, (size_t)L->ratio * coff * hd);
        L->c_norm = up_f32(W->comp.norm, (size_t)hd);
        if (!L->c_ape || !L->c_norm) goto oom;
    }
    if (L->ratio == 4) {
        const int dI = cfg->index_head_dim;
        L->i_ape = up_f32(W->icomp.ape, (size_t)4 * 2 * dI);
        L->i_norm = up_f32(W->icomp.norm, (size_t)dI);
        if (!L->i_ape || !L->i_norm) goto oom;
    }
    return 0;
oom:
    snprintf(err, errlen, "cuda backend: layer %d: out of GPU memory for its parameters", l);
    return -1;
}

static void free_layer(cu_layer *L)
{
    dense_weight *d[] = {&L->wqkv, &L->wq_b, &L->wo_a, &L->wo_b, &L->wcmp};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) dense_weight_free(d[i]);
    float *p[] = {L->q_norm, L->kv_norm, L->attn_sink, L->attn_norm, L->ffn_norm, L->hc_attn_fn, L->hc_attn_base,
                  L->hc_attn_scale, L->hc_ffn_fn, L->hc_ffn_base, L->hc_ffn_scale, L->c_ape, L->c_norm,
                  L->i_ape, L->i_norm};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (p[i]) cudaFree(p[i]);
}

/* ------------------------------------------------------------------------------- state */
static size_t al16(size_t v) { return (v + 15) & ~(size_t)15; }

/* Offsets of every layer's ring and compressor state in a slot and its entries in a page. */
static void layout_state(cuda_impl *c, size_t *slot_bytes, size_t *page_bytes)
{
    const v4_config *cfg = &c->w->cfg;
    const int bt = c->pool->block_tokens, hd = cfg->head_dim, dI = cfg->index_head_dim;
    size_t s = 0, p = 0;
    c->kv_rb = v4_kv_row_bytes(hd, cfg->rope_dim / 2, c->kv_fp8);
    for (int l = 0; l < cfg->n_layers; l++) {
        cu_layer *L = &c->L[l];
        L->ring_off = s;
        s = al16(s + (size_t)cfg->window * c->kv_rb);
        if (L->ratio > 0) {
            L->cst_off = s;
            s = al16(s + (size_t)(L->ratio == 4 ? 3 : 1) * 3 * hd * sizeof(float));
            L->page_off = p;
            p = al16(p + (size_t)(bt / L->ratio) * c->kv_rb);
        }
        if (L->ratio == 4) {
            L->ist_off = s;
            s = al16(s + (size_t)3 * 3 * dI * sizeof(float));
            L->ipage_off = p;
            p = al16(p + (c->index_fp8 ? v4_fp8_rows_bytes(bt / 4, dI) : (size_t)(bt / 4) * dI * 2));
        }
    }
    *slot_bytes = s;
    *page_bytes = p;
}

/* Make rank r's device current; rank 0's again after a loop over ranks. */
static void on(const cuda_impl *r) { cudaSetDevice(r->dev); }

static int st_seq_open(void *ctx, v4_seq_state *s)
{
    cuda_impl *c = ctx;
    if (c->n_slot_free == 0) return -1;
    const int slot = c->slot_free[--c->n_slot_free];
    int rc = 0;
    for (int r = 0; r < c->n_ranks && !rc; r++) {   /* every rank keeps the sequence's whole state */
        const cuda_impl *k = c->rk[r];
        on(k);
        rc = cudaMemsetAsync(k->ar.slots + (size_t)slot * k->ar.slot_bytes, 0, k->ar.slot_bytes, k->st) != cudaSuccess;
    }
    on(c);
    if (rc) {
        c->slot_free[c->n_slot_free++] = slot;
        return -1;
    }
    s->slot = slot;
    return 0;
}

static void st_seq_close(void *ctx, v4_seq_state *s)
{
    cuda_impl *c = ctx;
    c->slot_free[c->n_slot_free++] = s->slot;
}

static int st_page_add(void *ctx, int id)
{
    cuda_impl *c = ctx;
    return id < c->n_pages ? 0 : -1;
}

/* GPU memory left free: the share beyond gpu_memory_fraction (at least 256 MiB, for the runtime and cuBLAS-free
 * kernels' launches). */
static size_t reserve_bytes(const cuda_impl *c)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return (size_t)1 << 30;
    const size_t r = (size_t)((1.0 - c->mem_fraction) * (double)tot);
    return r > ((size_t)256 << 20) ? r : ((size_t)256 << 20);
}

/* Arenas within the pool's budget and the GPU memory left (keeping reserve_bytes free), the same on every rank (each
 * keeps every sequence's whole state; ranks sharing a GPU share what it has left). */
static int alloc_state(cuda_impl *c, char *err, size_t errlen)
{
    size_t slot_bytes = 0, page_bytes = 0;
    for (int r = 0; r < c->n_ranks; r++) layout_state(c->rk[r], &slot_bytes, &page_bytes);
    size_t budget = c->pool->budget;
    for (int r = 0; r < c->n_ranks; r++) {
        const cuda_impl *k = c->rk[r];
        if (!k->own_stream && r) continue;   /* rank 0 answers for its GPU */
        on(k);
        size_t fr = 0, tot = 0, share = 0;
        CK(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
        const size_t reserve = reserve_bytes(k);
        for (int q = 0; q < c->n_ranks; q++) share += c->rk[q]->dev == k->dev;
        if (fr < reserve + share * (slot_bytes + page_bytes)) {
            snprintf(err, errlen, "cuda backend: the model leaves %zu MiB of GPU %d's memory; its state needs at least "
                     "%zu MiB more (one sequence) beside a %zu MiB reserve", fr >> 20, k->dev,
                     share * (slot_bytes + page_bytes) >> 20, reserve >> 20);
            on(c);
            return -1;
        }
        if (budget > (fr - reserve) / share) budget = (fr - reserve) / share;
    }
    on(c);
    /* slots: one per sequence with two pages on average (at most MAX_SLOTS); the rest pages */
    size_t ns = budget / (slot_bytes + 2 * page_bytes);
    if (ns > MAX_SLOTS) ns = MAX_SLOTS;
    if (ns < 1) ns = 1;
    size_t np = page_bytes && budget > ns * slot_bytes ? (budget - ns * slot_bytes) / page_bytes : 0;
    if (page_bytes && np < 1) np = 1;
    for (int r = 0; r < c->n_ranks; r++) {
        cuda_impl *k = c->rk[r];
        k->n_slots = (int)ns;
        k->n_pages = (int)np;
        k->ar.slot_bytes = slot_bytes;
        k->ar.page_bytes = page_bytes ? page_bytes : 16;
        k->ar.block_tokens = c->pool->block_tokens;
        /* one more slot and page: the scratch sequence that pads a graph's batch */
        on(k);
        CK(cudaMalloc((void **)&k->ar.slots, (ns + 1) * slot_bytes), "state slots allocation");
        CK(cudaMalloc((void **)&k->ar.pages, (np + 1) * k->ar.page_bytes), "state pages allocation");
    }
    on(c);
    c->slot_free = malloc(ns * sizeof(int));
    if (!c->slot_free) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
    for (int i = 0; i < (int)ns; i++) c->slot_free[i] = (int)ns - 1 - i;
    c->n_slot_free = (int)ns;
    c->store = (v4_state_store){st_seq_open, st_seq_close, st_page_add, slot_bytes, page_bytes};
    c->pool->budget = ns * slot_bytes + np * page_bytes;
    v4_pool_set_store(c->pool, &c->store, c);
    return 0;
}

/* ------------------------------------------------------------------------ step buffers */
static int alloc_step(cuda_impl *c, char *err, size_t errlen)
{
    const v4_config *cfg = &c->w->cfg;
    const size_t N = (size_t)c->cap, dim = cfg->dim, hc = cfg->hc_mult, H = cfg->n_heads, hd = cfg->head_dim;
    const size_t nI = cfg->index_n_heads, dI = cfg->index_head_dim, G = cfg->o_groups, ol = cfg->o_lora_rank;
    const int maxpos = cfg->max_position > 0 ? cfg->max_position : (1 << 20);
    c->max_blocks = (maxpos + c->pool->block_tokens - 1) / c->pool->block_tokens + 1;
    c->meta_ints = 3 * N + 4 * N + N * (size_t)c->max_blocks + N;
    const int head = c->sh.rank == 0;   /* the layout is built, the head and sampling run, on rank 0 */
    if (head)
        for (int f = 0; f < 2; f++)
            CK(cudaHostAlloc((void **)&c->fl[f].hmeta, c->meta_ints * sizeof(int32_t), cudaHostAllocPortable),
               "pinned step layout");
    CK(cudaMalloc((void **)&c->dmeta, c->meta_ints * sizeof(int32_t)), "step layout");
    size_t ent = (size_t)maxpos / 4 + 1;
    c->score_floats = INDEX_SCRATCH_FLOATS < N * ent ? INDEX_SCRATCH_FLOATS : N * ent;
#define FB(p, cnt) CK(cudaMalloc((void **)&c->p, (cnt) * sizeof(float)), "step buffers")
#define HB(p, cnt) CK(cudaMalloc((void **)&c->p, (cnt) * sizeof(uint16_t)), "step buffers")
    FB(X, N * hc * dim);
    FB(f, N * dim);
    FB(post, N * hc);
    FB(comb, N * hc * hc);
    FB(qkv, N * (cfg->q_lora_rank + hd));
    FB(q, N * (H * hd + nI * dI));
    FB(cmp, N * (2 * 2 * hd + 4 * dI + nI));
    FB(scores, c->score_floats);
    if (c->ar_peer) {
        FB(f2, N * dim);
        FB(fsum, N * dim);
    }
    HB(xn, N * dim);
    HB(qr_b, N * cfg->q_lora_rank);
    HB(q_b, N * H * hd);
    HB(kv_b, N * hd);   /* bf16 rows, or FP8 KV rows (fewer bytes) */
    HB(iq_b, N * nI * dI);
    HB(o_b, N * H * hd);
    HB(u_b, N * G * ol);
    HB(y_b, (size_t)HEAD_ROWS * dim);
#undef FB
#undef HB
    c->att_scratch_floats = v4_attention_scratch_floats((int)H, (int)hd, ATT_SCRATCH_ROWS,
                                                        cfg->window + (cfg->index_topk > 512 ? cfg->index_topk : 512));
    const int hc_rows = (int)N > HEAD_ROWS ? (int)N : HEAD_ROWS;
    CK(cudaMalloc((void **)&c->hc_scratch, v4_hc_pre_scratch_floats(hc_rows, (int)dim, (int)hc) * sizeof(float)),
       "mHC scratch");
    if (c->att_scratch_floats)
        CK(cudaMalloc((void **)&c->att_scratch, c->att_scratch_floats * sizeof(float)), "attention scratch");
    CK(cudaMalloc((void **)&c->sel, N * (size_t)(cfg->index_topk > 0 ? cfg->index_topk : 1) * sizeof(int32_t)),
       "step buffers");
    if (!head) return 0;
    const size_t V = (size_t)cfg->vocab_size;
    CK(cudaMalloc((void **)&c->logits, (size_t)HEAD_ROWS * V * sizeof(float)), "step buffers");
    for (int f = 0; f < 2; f++) {
        cu_flight *F = &c->fl[f];
        CK(cudaHostAlloc((void **)&F->hsreq, HEAD_ROWS * sizeof(v4_sample_req), cudaHostAllocDefault), "sampling buffers");
        CK(cudaHostAlloc((void **)&F->htok, HEAD_ROWS * sizeof(int32_t), cudaHostAllocDefault), "sampling buffers");
        CK(cudaHostAlloc((void **)&F->hlp, HEAD_ROWS * sizeof(float), cudaHostAllocDefault), "sampling buffers");
        CK(cudaEventCreateWithFlags(&F->done, cudaEventDisableTiming), "step event");
    }
    CK(cudaHostAlloc((void **)&c->hhist, SAMPLE_HIST_INTS * sizeof(int32_t), cudaHostAllocDefault), "sampling buffers");
    CK(cudaMalloc((void **)&c->dsreq, HEAD_ROWS * sizeof(v4_sample_req)), "sampling buffers");
    CK(cudaMalloc((void **)&c->dhist, SAMPLE_HIST_INTS * sizeof(int32_t)), "sampling buffers");
    CK(cudaMalloc((void **)&c->dtok, HEAD_ROWS * sizeof(int32_t)), "sampling buffers");
    CK(cudaMalloc((void **)&c->dlp, HEAD_ROWS * sizeof(float)), "sampling buffers");
    CK(cudaMalloc((void **)&c->probs, HEAD_ROWS * V * sizeof(float)), "sampling buffers");
    CK(cudaMalloc((void **)&c->marks, HEAD_ROWS * ((V + 31) / 32) * sizeof(uint32_t)), "sampling buffers");
    if (sl_sampler_init(&c->smp, (int)V)) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
    CK(cudaHostAlloc((void **)&c->hlogits, (size_t)HEAD_ROWS * cfg->vocab_size * sizeof(float), cudaHostAllocDefault),
       "pinned logits");
    return 0;
}

/* ---------------------------------------------------------------------------------- step */
typedef struct {
    sl_seq_span *sp;   /* the caller's span */
    int a, m;          /* its tokens [a, a+m) run in this sub-step */
    int fed;           /* -1, or its one token is dtok[fed] (sampled by the step launched before) */
} piece;

/* Fill the pinned step layout h (a flight's hmeta) for the pieces, padded with `pad` one-token rows of the scratch
 * sequence (graph buckets); every row wants logits when all_rows, else those past logits_from.
 * Returns the ints used, or -1 with err. The layout: ids, positions, spans (cap each), then per span
 * slot, pos0, row0, n, the block table (maxb a span) and the logits rows. */
static long build_layout(cuda_impl *c, int32_t *h, const piece *pc, int np, int pad, int maxb, int all_rows, v4_step *S,
                         int *n_out, int *nl_out, const int32_t **d_lrows, char *err, size_t errlen)
{
    const int V = c->w->cfg.vocab_size, ns = np + pad;
    int32_t *tid = h, *tpos = h + c->cap, *tsp = h + 2 * c->cap;
    int32_t *sslot = h + 3 * c->cap, *spos0 = sslot + ns, *srow0 = spos0 + ns, *sn = srow0 + ns;
    int32_t *blk = sn + ns, *lrows = blk + (size_t)ns * maxb;
    int n = 0, nl = 0;
    for (int k = 0; k < ns; k++) {
        const sl_seq_span *sp = k < np ? pc[k].sp : NULL;
        const v4_seq_state *s = sp ? sp->st : NULL;
        const int m = sp ? pc[k].m : 1;
        sslot[k] = s ? s->slot : c->n_slots;           /* the scratch slot */
        spos0[k] = s ? s->pos : 0;
        srow0[k] = n;
        sn[k] = m;
        for (int b = 0; b < maxb; b++) blk[(size_t)k * maxb + b] = s && b < s->n_blocks ? s->blocks[b] : c->n_pages;
        for (int j = 0; j < m; j++, n++) {
            const int fed = sp && pc[k].fed >= 0;   /* -1 - i: the embedding takes dtok[i] (v4_embed's fed) */
            const int32_t t = !sp ? 0 : fed ? -1 - pc[k].fed : sp->tokens[pc[k].a + j];
            if ((t < 0 && !fed) || t >= V) {
                snprintf(err, errlen, "cuda backend: token id %d out of range", (int)t);
                return -1;
            }
            tid[n] = t;
            tpos[n] = spos0[k] + j;
            tsp[n] = k;
            if (all_rows || (sp && pc[k].a + j >= sp->logits_from)) lrows[nl++] = n;
        }
    }
    const int32_t *d = c->dmeta;
    *S = (v4_step){n, ns, d, d + c->cap, d + 2 * c->cap, d + 3 * c->cap, d + 3 * c->cap + ns, d + 3 * c->cap + 2 * ns,
                   d + 3 * c->cap + 3 * ns, d + 3 * c->cap + 4 * ns, maxb};
    *d_lrows = d + (lrows - h);
    *n_out = n;
    *nl_out = nl;
    return (long)((lrows + nl) - h);
}

/* Branches: work the step's main stream st does not need until later runs on a stream of its own, forked from st
 * (so it follows everything enqueued on st so far) and joined back where it is first read: each sublayer's mHC post
 * and comb (the next sublayer's post reads them), a layer's compressor path (the indexer and the attention read it).
 * In a profiled capture a branch is st itself, so every launch is timed on its own. */
static int branch_fork(cuda_impl *c, int b, cudaStream_t *bs, char *err, size_t errlen)
{
    *bs = c->st;
    if (c->prof_ms) return 0;
    CK(cudaEventRecord(c->fork_ev[b], c->st), "stream fork");
    CK(cudaStreamWaitEvent(c->side[b], c->fork_ev[b], 0), "stream fork");
    *bs = c->side[b];
    return 0;
}

static int branch_end(cuda_impl *c, int b, char *err, size_t errlen)
{
    if (c->prof_ms) return 0;
    CK(cudaEventRecord(c->join_ev[b], c->side[b]), "stream join");
    c->open[b] = 1;
    return 0;
}

/* st waits for branch b's work (a graph's capture also ends only with every stream it forked joined). */
static int branch_join(cuda_impl *c, int b, char *err, size_t errlen)
{
    if (!c->open[b]) return 0;
    CK(cudaStreamWaitEvent(c->st, c->join_ev[b], 0), "stream join");
    c->open[b] = 0;
    return 0;
}

/* A sublayer's mHC pre for n rows (pend: the previous sublayer's output, whose post is applied first): the mixes,
 * then the collapse and norm into xn on st, and post and comb on a branch, where the Sinkhorn's serial rounds run
 * beside the sublayer instead of before it. */
static int enqueue_hc_pre(cuda_impl *c, int n, const float *fn, const float *scale, const float *base,
                          const float *norm_w, const float *pend, const char *what, char *err, size_t errlen)
{
    const v4_config *cfg = &c->w->cfg;
    const int dim = cfg->dim, hc = cfg->hc_mult;
    cudaStream_t bs;
    if (branch_join(c, BR_COMB, err, errlen)) return -1;
    LAUNCH(SL_FAM_MHC, v4_hc_mix(c->X, n, NULL, dim, hc, fn, 0, pend, c->post, c->comb, c->hc_scratch, c->st), what);
    if (branch_fork(c, BR_COMB, &bs, err, errlen)) return -1;
    LAUNCH(SL_FAM_MHC,
           v4_hc_comb(n, dim, hc, scale, base, cfg->hc_sinkhorn_iters, cfg->hc_eps, cfg->norm_eps, c->hc_scratch,
                      c->post, c->comb, bs),
           "mHC post and comb");
    if (branch_end(c, BR_COMB, err, errlen)) return -1;
    LAUNCH(SL_FAM_MHC,
           v4_hc_collapse(c->X, n, NULL, dim, hc, scale, base, cfg->hc_eps, cfg->norm_eps, norm_w, 0, c->hc_scratch,
                          c->xn, c->st),
           what);
    return 0;
}

/* Layer l's attention path on the step S's queries (q_b; for CSA the indexer's iq_b and weights in cmp): for CSA the
 * indexer's scores and top-k into sel, then the sparse attention over the window and the compressed entries into
 * o_b. */
static int enqueue_attention(cuda_impl *c, const v4_step *S, int l, int max_t, char *err, size_t errlen)
{
    const v4_config *cfg = &c->w->cfg;
    const cu_layer *L = &c->L[l];
    const int H = c->sh.nh, hd = cfg->head_dim, nI = cfg->index_n_heads, dI = cfg->index_head_dim;   /* the rank's heads */
    const int half = cfg->rope_dim / 2, W = cfg->window, n = S->n, ratio = L->ratio, ncmp = L->n_cmp;
    const double *freq = ratio ? c->freq_comp : c->freq_main;
    int max_keys = W < max_t + 1 ? W : max_t + 1;
    if (ratio == 4) {
        const float *cmp_i = c->cmp + 2 * 2 * hd;   /* the indexer's C, Z and weights after the compressor's */
        const int ent = (max_t + 1) / 4;
        const int rows = ent > 0 ? (int)(c->score_floats / (size_t)ent) : n;
        const float wsc = 1.0f / sqrtf((float)dI) / sqrtf((float)nI);
        for (int r0 = 0; r0 < n; r0 += rows)
            LAUNCH(SL_FAM_INDEXER,
                   v4_indexer(S, &c->ar, L->ipage_off, c->index_fp8, r0, n - r0 < rows ? n - r0 : rows, c->iq_b, nI, dI,
                              cmp_i + 4 * dI, ncmp, wsc, cfg->index_topk, c->sel, c->scores, ent, c->st),
                   "indexer");
        max_keys += cfg->index_topk < ent ? cfg->index_topk : ent;
    } else if (ratio) {
        max_keys += (max_t + 1) / ratio;
    }
    /* longer key splits at larger batches (less scratch traffic); the fixed ones where batch invariance is asked */
    const int split = c->deterministic ? 0 : v4_attention_split(n, max_keys, c->n_sms);
    LAUNCH(SL_FAM_ATTENTION,
           v4_attention(S, &c->ar, L->ring_off, W, L->page_off, ratio, c->sel, cfg->index_topk, c->q_b, c->kv_b,
                        c->kv_fp8, H, hd,
                        1.0f / sqrtf((float)hd), L->attn_sink, max_keys, c->att_scratch, c->att_scratch_floats, half,
                        freq, split, c->o_b, c->st),
           "attention");
    return 0;
}

/* Sublayer `half` (0 attention, 1 MoE) of layer l on rank c for the step S (max_t: the largest position in it; it
 * bounds the key and candidate counts): its mHC pre with the previous sublayer's post folded in, ..., its output into
 * c->part[half] (the rank's share of it where the model is split). */
static int enqueue_sublayer(cuda_impl *c, const v4_step *Sp, int l, int half_, int max_t, char *err, size_t errlen)
{
    const v4_config *cfg = &c->w->cfg;
    const int dim = cfg->dim, H = c->sh.nh, hd = cfg->head_dim, ql = cfg->q_lora_rank;
    const int nI = cfg->index_n_heads, dI = cfg->index_head_dim, G = c->sh.ng, ol = cfg->o_lora_rank;
    const int half = cfg->rope_dim / 2, W = cfg->window, n = Sp->n;
    const float eps = cfg->norm_eps;
    const v4_step S = *Sp;
    cudaStream_t st = c->st;
    const cu_layer *L = &c->L[l];
    if (half_ == 1) {
        if (enqueue_hc_pre(c, n, L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, L->ffn_norm, c->sum[0],
                           "mHC post (attention) + pre (MoE)", err, errlen))
            return -1;
        float *f = c->part[1];
        if (c->moe.fast[l]) {
            /* the fast kernels' tiling depends on the batch; deterministic: each token alone, as in a batch of one */
            const int per = c->deterministic ? 1 : n;
            for (int i = 0; i < n; i += per)
                if (moe_cuda_forward(&c->moe.L[l], &c->moe.W, c->xn + (size_t)i * dim, S.tok_id + i, per,
                                     f + (size_t)i * dim, st)) {
                    snprintf(err, errlen, "cuda backend: layer %d: MoE launch failed (see the line above)", l);
                    return -1;
                }
            mark(c, SL_FAM_MOE, "MoE");
        } else {
            LAUNCH(SL_FAM_MOE, v4_moe_ref(&S, &c->moe.ref[l], c->xn, f, st), "MoE (generic)");
        }
        return 0;
    }
    const int ratio = L->ratio, csa = ratio == 4, coff = csa ? 2 : 1;
    const double *freq = ratio ? c->freq_comp : c->freq_main;
    const int nqkv = ql + hd, ncmp = L->n_cmp;
    const float *cmp_i = c->cmp + 2 * coff * hd;   /* CSA: the indexer's C, Z and weights after the compressor's */
    if (enqueue_hc_pre(c, n, L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, L->attn_norm, l ? c->sum[1] : NULL,
                       l ? "mHC post (MoE) + pre (attention)" : "mHC pre (attention)", err, errlen))
        return -1;
    if (ratio) {   /* the compressor path, beside the queries' projections: the projections, then the windows */
        cudaStream_t bs;
        if (branch_fork(c, BR_COMPRESS, &bs, err, errlen)) return -1;
        LAUNCH(SL_FAM_DENSE, dense_gemm(&L->wcmp, 0, ncmp, c->xn, dim, n, c->cmp, ncmp, bs), "compressor projections");
        if (csa)
            LAUNCH(SL_FAM_COMPRESS,
                   v4_compress(&S, &c->ar, L->ist_off, L->ipage_off, 4, dI, cmp_i, cmp_i + 2 * dI, ncmp, L->i_ape,
                               L->i_norm, eps, half, freq, c->index_fp8 ? V4_ENTRY_FP8_ROWS : V4_ENTRY_BF16, bs),
                   "indexer compressor");
        LAUNCH(SL_FAM_COMPRESS,
               v4_compress(&S, &c->ar, L->cst_off, L->page_off, ratio, hd, c->cmp, c->cmp + coff * hd, ncmp, L->c_ape,
                           L->c_norm, eps, half, freq, c->kv_fp8 ? V4_ENTRY_KV8 : V4_ENTRY_BF16, bs),
               "compressor");
        if (branch_end(c, BR_COMPRESS, err, errlen)) return -1;
    }
    LAUNCH(SL_FAM_DENSE, dense_gemm(&L->wqkv, 0, nqkv, c->xn, dim, n, c->qkv, nqkv, st), "wq_a + wkv");
    const v4_norm_job qkv_norms[2] = {   /* q_norm; kv_norm + RoPE */
        {c->qkv, nqkv, n, 1, ql, 1, L->q_norm, 0, NULL, c->qr_b, ql, 0, NULL},
        {c->qkv + ql, nqkv, n, 1, hd, 1, L->kv_norm, half, freq, c->kv_b, hd, 0, c->kv_fp8 ? (uint8_t *)c->kv_b : NULL}};
    LAUNCH(SL_FAM_MHC, v4_norm_rope(&S, qkv_norms, 2, eps, st), "q_norm, kv_norm + RoPE");
    const int nq = L->wq_b.n;   /* the heads' queries, then (CSA) the indexer's */
    LAUNCH(SL_FAM_DENSE, dense_gemm(&L->wq_b, 0, nq, c->qr_b, ql, n, c->q, nq, st),
           csa ? "wq_b + indexer wq_b" : "wq_b");
    const v4_norm_job q_norms[2] = {   /* per head: q rms + RoPE; the indexer's q: RoPE */
        {c->q, hd, n * H, H, hd, 1, NULL, half, freq, c->q_b, hd, nq, NULL},
        {c->q + H * hd, dI, n * nI, nI, dI, 0, NULL, half, freq, c->iq_b, dI, nq, NULL}};
    LAUNCH(SL_FAM_MHC, v4_norm_rope(&S, q_norms, csa ? 2 : 1, eps, st), "q rms + RoPE");
    if (branch_join(c, BR_COMPRESS, err, errlen)) return -1;
    if (enqueue_attention(c, &S, l, max_t, err, errlen)) return -1;
    LAUNCH(SL_FAM_ATTENTION, v4_ring_store(&S, &c->ar, L->ring_off, W, c->kv_b, c->kv_rb, st), "ring store");
    LAUNCH(SL_FAM_DENSE, dense_gemm_grouped(&L->wo_a, G, c->o_b, H * hd, H * hd / G, n, c->u_b, 1, G * ol, st),
           "wo_a");
    LAUNCH(SL_FAM_DENSE, dense_gemm(&L->wo_b, 0, dim, c->u_b, G * ol, n, c->part[0], dim, st), "wo_b");
    return 0;
}

/* The step's layout S (built on rank 0's device arrays) as rank k's copy addresses it. */
static v4_step step_on(const cuda_impl *c, const cuda_impl *k, const v4_step *S)
{
    v4_step R = *S;
#define REBASE(p) R.p = k->dmeta + (S->p - c->dmeta)
    REBASE(tok_id);
    REBASE(tok_pos);
    REBASE(tok_span);
    REBASE(span_slot);
    REBASE(span_pos0);
    REBASE(span_row0);
    REBASE(span_n);
    REBASE(blocks);
#undef REBASE
    return R;
}

/* The ranks' outputs of sublayer `half` for n rows summed into each rank's sum[half]. Every rank's all-reduce is
 * enqueued before the host launches anything more: a kernel's first launch may load it (CUDA's lazy loading), which
 * waits for the device's running kernels, and an all-reduce running there waits only for launches already enqueued. */
static int enqueue_allreduce(cuda_impl *c, int half, int n, char *err, size_t errlen)
{
    if (c->n_ranks == 1) return 0;
    const size_t count = (size_t)n * c->w->cfg.dim;
    if (!c->ar_peer) {   /* one GPU, one stream: one launch sums every rank's buffer in place */
        v4_ar_local a = {.n = c->n_ranks};
        for (int r = 0; r < c->n_ranks; r++) a.buf[r] = c->rk[r]->part[half];
        LAUNCH(SL_FAM_COLLECTIVE, v4_allreduce_local(&a, count, c->st), "all-reduce");
        return 0;
    }
    v4_ar_peer a = {.n = c->n_ranks, .fault = c->ar_fault, .timeout_ns = AR_TIMEOUT_NS};
    for (int r = 0; r < c->n_ranks; r++) {
        a.in[r] = c->rk[r]->part[half];
        a.inbox[r] = c->rk[r]->ar_inbox;
    }
    for (int r = c->n_ranks - 1; r >= 0; r--) {   /* rank 0 last: its device stays current */
        cuda_impl *k = c->rk[r];
        on(k);
        a.me = r;
        a.epoch = k->ar_epoch;
        if (r) CK(v4_allreduce_peer(&a, count, k->sum[half], k->st), "all-reduce");
        else LAUNCH(SL_FAM_COLLECTIVE, v4_allreduce_peer(&a, count, k->sum[half], k->st), "all-reduce");
    }
    return 0;
}

/* Every layer of the step S on every rank (max_t: the largest position in it), or the first c->sublayers
 * sublayers; each rank's sublayer, then the all-reduce of their outputs. */
static int enqueue_layers(cuda_impl *c, const v4_step *S, int max_t, char *err, size_t errlen)
{
    c->last_S = *S;
    c->last_max_t = max_t;
    for (int r = 0; r < c->n_ranks; r++)   /* a failed step's forks are not joined */
        for (int b = 0; b < N_BRANCH; b++) c->rk[r]->open[b] = 0;
    const v4_config *cfg = &c->w->cfg;
    const int total = 2 * cfg->n_layers, stop = c->sublayers && c->sublayers < total ? c->sublayers : total;
    for (int r = c->n_ranks - 1; r >= 0; r--) {
        cuda_impl *k = c->rk[r];
        const v4_step Sk = step_on(c, k, S);
        on(k);
        CK(v4_embed(&Sk, k->embed, k->embed_bf16, cfg->dim, cfg->hc_mult, k->dtok, k->X, k->st), "embedding");
        if (!r) mark(c, SL_FAM_MHC, "embedding");
    }
    for (int j = 0; j < stop; j++) {
        for (int r = c->n_ranks - 1; r >= 0; r--) {
            cuda_impl *k = c->rk[r];
            const v4_step Sk = step_on(c, k, S);
            on(k);
            if (enqueue_sublayer(k, &Sk, j / 2, j % 2, max_t, err, errlen)) return -1;
        }
        if (enqueue_allreduce(c, j % 2, S->n, err, errlen)) return -1;
        c->flast = c->sum[j % 2];
    }
    for (int r = c->n_ranks - 1; r >= 0; r--) {   /* every branch: the head's pending post reads the last comb */
        on(c->rk[r]);
        for (int b = 0; b < N_BRANCH; b++)
            if (branch_join(c->rk[r], b, err, errlen)) return -1;
    }
    on(c);
    return 0;
}

/* The head's collapse, final norm and LM head for m rows (listed at d_rows) into c->logits. */
static int enqueue_head(cuda_impl *c, const int32_t *d_rows, int m, char *err, size_t errlen)
{
    const v4_config *cfg = &c->w->cfg;
    LAUNCH(SL_FAM_HEAD,
           v4_hc_pre(c->X, m, d_rows, cfg->dim, cfg->hc_mult, c->hc_head_fn, c->hc_head_scale, c->hc_head_base, 0,
                     cfg->hc_eps, cfg->norm_eps, c->norm, 1, c->flast, c->post, c->comb, c->y_b, NULL, NULL,
                     c->hc_scratch, c->st),
           "mHC post (the last sublayer) + head");
    LAUNCH(SL_FAM_HEAD,
           dense_gemm(&c->head, 0, cfg->vocab_size, c->y_b, cfg->dim, m, c->logits, cfg->vocab_size, c->st), "LM head");
    return 0;
}

/* The device sampler's request for span sp's row `row` (its history at hhist[hist_off..] when it is penalised). */
static v4_sample_req sample_req(int row, const sl_seq_span *sp, int hist_off)
{
    const sl_sampling *sm = sp->sample;
    const int pen = sm->repetition_penalty != 1.0f;
    return (v4_sample_req){row, sm->temperature, sm->top_p, sm->min_p, sm->repetition_penalty, sm->top_k, sp->rng,
                           hist_off, pen ? sp->n_hist : 0};
}

/* n requests in F->hsreq (n_hist history tokens in hhist) to the device, sampled from the logits rows, their tokens
 * and logprobs back into F's pinned buffers; all enqueued on st. */
static cudaError_t enqueue_sampling(cuda_impl *c, const cu_flight *F, int n, int n_hist)
{
    cudaError_t e = cudaSuccess;
    if (n_hist) e = cudaMemcpyAsync(c->dhist, c->hhist, (size_t)n_hist * sizeof(int32_t), cudaMemcpyHostToDevice, c->st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(c->dsreq, F->hsreq, (size_t)n * sizeof(v4_sample_req), cudaMemcpyHostToDevice, c->st);
    if (e == cudaSuccess)
        e = v4_sample(c->logits, n, c->w->cfg.vocab_size, c->dsreq, c->dhist, c->probs, c->marks, c->dtok, c->dlp,
                      c->st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(F->htok, c->dtok, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, c->st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(F->hlp, c->dlp, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, c->st);
    return e;
}

/* Copy m logits rows (starting at logits row 0) back and hand row q to the row lrows[r0 + q]'s span. */
static int scatter_logits(cuda_impl *c, const piece *pc, int np, int ns, int r0, int m, char *err, size_t errlen)
{
    const int V = c->w->cfg.vocab_size;
    cu_flight *F = &c->fl[0];
    const int32_t *srow0 = F->hmeta + 3 * c->cap + 2 * ns;   /* ns spans in the layout, the first np real */
    const int32_t *lrows = F->hmeta + c->lrows_at;
    int n_smp = 0, n_hist = 0, k = 0;
    for (int q = 0; q < m; q++) {   /* sampled rows go to the sampler; the others' logits come back */
        const int row = lrows[r0 + q];   /* rows in step order: the span index only grows */
        while (k + 1 < np && srow0[k + 1] <= row) k++;
        sl_seq_span *sp = pc[k].sp;
        c->row_piece[q] = k;
        const sl_sampling *sm = sp->sample;
        const int pen = sm && sm->repetition_penalty != 1.0f;
        c->row_sample[q] = -1;   /* logits wanted, or a history too long for the device's copy: sampled on the host */
        if (sm && (!pen || (size_t)n_hist + (size_t)sp->n_hist <= SAMPLE_HIST_INTS)) {
            F->hsreq[n_smp] = sample_req(q, sp, n_hist);
            if (pen) {
                memcpy(c->hhist + n_hist, sp->hist, (size_t)sp->n_hist * sizeof(int32_t));
                n_hist += sp->n_hist;
            }
            c->row_sample[q] = n_smp++;
        }
    }
    for (int q = 0, slot = 0; q < m;) {   /* the logits rows, one copy per run of consecutive ones */
        if (c->row_sample[q] >= 0) {
            q++;
            continue;
        }
        int e = q;
        while (e < m && c->row_sample[e] < 0) e++;
        CK(cudaMemcpyAsync(c->hlogits + (size_t)slot * V, c->logits + (size_t)q * V, (size_t)(e - q) * V * sizeof(float),
                           cudaMemcpyDeviceToHost, c->st),
           "logits copy");
        slot += e - q;
        q = e;
    }
    if (n_smp) CK(enqueue_sampling(c, F, n_smp, n_hist), "sampling");
    CK(cudaStreamSynchronize(c->st), "step");
    for (int q = 0, slot = 0; q < m; q++) {
        const int k = c->row_piece[q];
        sl_seq_span *sp = pc[k].sp;
        if (c->row_sample[q] >= 0) {
            sp->token = F->htok[c->row_sample[q]];
            sp->logprob = F->hlp[c->row_sample[q]];
            continue;
        }
        const float *row = c->hlogits + (size_t)slot++ * V;
        if (sp->sample) {   /* sampled on the host: the span's caller has no row for it; do it here */
            sp->token = sl_sample(&c->smp, sp->sample, row, sp->hist, sp->n_hist, &(sl_rng){sp->rng}, &sp->logprob);
            continue;
        }
        const int tok = pc[k].a + (lrows[r0 + q] - srow0[k]);
        memcpy(sp->logits + (size_t)(tok - sp->logits_from) * V, row, (size_t)V * sizeof(float));
    }
    return 0;
}

static int pow2_at_least(int v)
{
    int p = 1;
    while (p < v) p *= 2;
    return p;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Rank k's stream polled until it is idle or the monotonic deadline passes (no unbounded sync on a GPU that may hang):
 * cudaSuccess, its error, or cudaErrorNotReady at the deadline. */
static cudaError_t wait_idle(const cuda_impl *k, double deadline)
{
    on(k);
    cudaError_t e;
    while ((e = cudaStreamQuery(k->st)) == cudaErrorNotReady && mono_s() < deadline) sched_yield();
    return e;
}

/* Make the all-reduce's flags and counters fresh on every rank (after a step failed: the ranks may have run different
 * numbers of all-reduces), once every stream is idle (a rank still waiting gives up within AR_TIMEOUT_NS). A GPU
 * still busy after that hangs: the backend is broken, and every later step fails at once with that line. */
static void ar_reset(cuda_impl *c)
{
    if (!c->ar_peer) return;
    const double deadline = mono_s() + 2 * AR_TIMEOUT_NS * 1e-9;
    for (int r = c->n_ranks - 1; r >= 0; r--) {   /* every GPU idle before any flag is cleared */
        const cuda_impl *k = c->rk[r];
        if (wait_idle(k, deadline) == cudaErrorNotReady) {
            snprintf(c->broken, sizeof c->broken, "cuda backend: GPU %d (rank %d) hangs; the engine cannot step again",
                     k->dev, r);
            on(c);
            return;
        }
        cudaDeviceSynchronize();
    }
    for (int r = c->n_ranks - 1; r >= 0; r--) {
        const cuda_impl *k = c->rk[r];
        on(k);
        cudaMemset(k->ar_inbox, 0, V4_AR_BLOCKS * V4_AR_MAX_RANKS * sizeof(unsigned));
        cudaMemset(k->ar_epoch, 0, V4_AR_BLOCKS * sizeof(unsigned));
    }
    for (int r = c->n_ranks - 1; r >= 0; r--) {   /* cleared everywhere before any rank runs again */
        on(c->rk[r]);
        cudaDeviceSynchronize();
    }
    *(volatile unsigned *)c->ar_fault = 0;
}

/* After rank 0's stream is done: the other ranks' streams, each given AR_TIMEOUT_NS more (they ran the same
 * all-reduces, so they are at most a little behind; one that never finishes is a GPU that hangs, and the step fails
 * rather than the engine), and whether an all-reduce gave up waiting for a GPU. */
static int sync_ranks(cuda_impl *c, char *err, size_t errlen)
{
    int rc = 0;
    const double deadline = mono_s() + AR_TIMEOUT_NS * 1e-9;
    for (int r = 1; r < c->n_ranks; r++) {
        const cuda_impl *k = c->rk[r];
        if (!k->own_stream) continue;
        const cudaError_t e = wait_idle(k, deadline);
        if (e != cudaSuccess && !rc) {
            snprintf(err, errlen, "cuda backend: GPU %d (rank %d): the step failed: %s", k->dev, r,
                     e == cudaErrorNotReady ? "it did not finish within 10 s of the others" : cudaGetErrorString(e));
            rc = -1;
        }
    }
    on(c);
    const unsigned who = c->ar_fault ? *(volatile unsigned *)c->ar_fault : 0;
    if (!rc && who) {
        snprintf(err, errlen, "cuda backend: GPU %d (rank %u) did not reach an all-reduce within %.0f s; the step failed",
                 c->rk[who - 1]->dev, who - 1, AR_TIMEOUT_NS * 1e-9);
        rc = -1;
    }
    if (rc) ar_reset(c);
    return rc;
}

/* The step layout (built in rank 0's pinned copy h, `used` ints) to every rank's device copy. */
static int upload_layout(cuda_impl *c, const int32_t *h, long used, char *err, size_t errlen)
{
    for (int r = c->n_ranks - 1; r >= 0; r--) {
        const cuda_impl *k = c->rk[r];
        on(k);
        CK(cudaMemcpyAsync(k->dmeta, h, (size_t)used * sizeof(int32_t), cudaMemcpyHostToDevice, k->st),
           "step layout upload");
    }
    return 0;
}

static void graphs_free(cuda_impl *c, cudaGraphExec_t *x)
{
    for (int r = c->n_ranks - 1; r >= 0; r--)
        if (x[r]) {
            on(c->rk[r]);
            cudaGraphExecDestroy(x[r]);
            x[r] = NULL;
        }
}

static int graphs_launch(cuda_impl *c, cudaGraphExec_t *x, char *err, size_t errlen)
{
    for (int r = c->n_ranks - 1; r >= 0; r--)
        if (x[r]) {
            on(c->rk[r]);
            CK(cudaGraphLaunch(x[r], c->rk[r]->st), "graph launch");
        }
    return 0;
}

/* Capture the decode step of layout S (context bucket cb, B rows) as a graph per stream (x[r] for rank 0 and each
 * rank with a GPU of its own, else NULL): the scratch sequence zeroed, every layer, the head. When profiling, a stamp
 * follows every launch and PROF_CAL stamps in a row end it (*cal0: the first of those); otherwise mark() adds
 * nothing. */
static int capture_step(cuda_impl *c, const v4_step *S, int cb, const int32_t *d_lrows, int B, cudaGraphExec_t *x,
                        int *cal0, char *err, size_t errlen)
{
    cudaGraph_t g[SL_MAX_RANKS] = {0};
    int begun[SL_MAX_RANKS] = {0}, rc = 0;
    c->n_marks = 0;
    for (int r = c->n_ranks - 1; r >= 0; r--) {
        x[r] = NULL;
        if (rc || (r && !c->rk[r]->own_stream)) continue;
        on(c->rk[r]);
        rc = cudaStreamBeginCapture(c->rk[r]->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
        begun[r] = !rc;
        if (rc) snprintf(err, errlen, "cuda backend: graph capture could not begin on GPU %d", c->rk[r]->dev);
    }
    mark(c, -1, NULL);
    for (int r = c->n_ranks - 1; r >= 0 && !rc; r--) {
        const cuda_impl *k = c->rk[r];
        on(k);
        rc = cudaMemsetAsync(k->ar.slots + (size_t)k->n_slots * k->ar.slot_bytes, 0, k->ar.slot_bytes, k->st) !=
             cudaSuccess;
        if (rc) snprintf(err, errlen, "cuda backend: the scratch sequence's reset failed on GPU %d", k->dev);
    }
    mark(c, SL_FAM_MHC, "scratch sequence reset");
    if (!rc) rc = enqueue_layers(c, S, cb - 1, err, errlen);
    on(c);
    if (!rc) rc = enqueue_head(c, d_lrows, B, err, errlen);
    *cal0 = c->n_marks;
    for (int k = 0; k < PROF_CAL; k++) mark(c, -1, NULL);
    cudaError_t e = cudaSuccess;
    for (int r = c->n_ranks - 1; r >= 0; r--)
        if (begun[r]) {
            on(c->rk[r]);
            const cudaError_t er = cudaStreamEndCapture(c->rk[r]->st, &g[r]);
            if (e == cudaSuccess) e = er;
        }
    for (int r = c->n_ranks - 1; r >= 0 && !rc && e == cudaSuccess; r--)
        if (g[r]) {
            on(c->rk[r]);
            e = cudaGraphInstantiate(&x[r], g[r], 0);
        }
    for (int r = c->n_ranks - 1; r >= 0; r--)
        if (g[r]) {
            on(c->rk[r]);
            cudaGraphDestroy(g[r]);
        }
    if (rc || e != cudaSuccess) graphs_free(c, x);
    on(c);
    if (rc) return -1;
    CK(e, "graph capture");
    return 0;
}

/* run_graph's step captured afresh with profile stamps (not kept), replayed once; the families' times go to
 * c->prof_ms. */
static int run_profiled(cuda_impl *c, piece *pc, int np, const v4_step *S, int cb, const int32_t *d_lrows, int B,
                        char *err, size_t errlen)
{
    cudaGraphExec_t x[SL_MAX_RANKS];
    int cal0, rc;
    if (capture_step(c, S, cb, d_lrows, B, x, &cal0, err, errlen)) return -1;
    rc = graphs_launch(c, x, err, errlen);
    on(c);
    if (!rc) rc = scatter_logits(c, pc, np, B, 0, np, err, errlen);
    if (!rc) rc = sync_ranks(c, err, errlen);
    graphs_free(c, x);
    on(c);
    if (rc) return -1;
    CK(cudaMemcpy(c->prof_hts, c->prof_ts, (size_t)c->n_marks * sizeof(uint64_t), cudaMemcpyDeviceToHost),
       "profile copy");
    const int n = c->n_marks;
    const double stamp_ns = n - cal0 > 1 ? (double)(c->prof_hts[n - 1] - c->prof_hts[cal0]) / (n - cal0 - 1) : 0;
    for (int f = 0; f < SL_FAM_N; f++) c->prof_ms[f] = 0;
    c->prof_launches = 0;
    for (int k = 1; k < cal0; k++)
        if (c->prof_fam[k] >= 0) {
            double ns = (double)(c->prof_hts[k] - c->prof_hts[k - 1]) - stamp_ns;
            if (ns < 0) ns = 0;
            c->prof_ms[c->prof_fam[k]] += ns * 1e-6;
            c->prof_what[c->prof_launches] = c->prof_what[k];
            c->prof_ns[c->prof_launches++] = ns;
        }
    for (int k = 0; k < np; k++) pc[k].sp->st->pos += pc[k].m;
    return 0;
}

/* A decode step (one token per sequence, at most GRAPH_MAX_BATCH sequences) as a CUDA graph: one per
 * (batch bucket, context bucket), both powers of two, captured on first use. The batch is padded with
 * rows of the scratch sequence (zeroed each step, position 0), the block tables are as wide as the
 * context bucket needs, and the key / candidate bounds come from the bucket, so a replay's launch
 * shapes are the capture's; only the step layout (uploaded before the replay) changes. Every row's
 * logits are computed; the real rows' are copied back.
 * graph_layout builds and uploads the layout of such a step through the pinned buffer h (*B, *cb: its buckets);
 * graph_enqueue then replays the
 * buckets' graph, capturing it first on first use. */
static int graph_layout(cuda_impl *c, int32_t *h, const piece *pc, int np, int max_t, int *B, int *cb, v4_step *S,
                        const int32_t **d_lrows, char *err, size_t errlen)
{
    const int bt = c->pool->block_tokens;
    *B = pow2_at_least(np);
    *cb = pow2_at_least(max_t + 1 > 128 ? max_t + 1 : 128);
    int n, nl;
    const long used = build_layout(c, h, pc, np, *B - np, *cb / bt + 1, 1, S, &n, &nl, d_lrows, err, errlen);
    if (used < 0) return -1;
    c->lrows_at = (size_t)(*d_lrows - c->dmeta);
    if (upload_layout(c, h, used, err, errlen)) return -1;
    on(c);
    c->last_S = *S;   /* a replay enqueues no layer: the layout it runs is this one */
    c->last_max_t = *cb - 1;
    return 0;
}

static int graph_enqueue(cuda_impl *c, const v4_step *S, int B, int cb, const int32_t *d_lrows, char *err,
                         size_t errlen)
{
    int gi = -1;
    for (int i = 0; i < c->n_graphs; i++)
        if (c->graphs[i].batch == B && c->graphs[i].ctx == cb) gi = i;
    if (gi < 0) {
        if (c->n_graphs == MAX_GRAPHS) {   /* the oldest goes */
            graphs_free(c, c->graphs[0].exec);
            memmove(c->graphs, c->graphs + 1, (MAX_GRAPHS - 1) * sizeof *c->graphs);
            c->n_graphs--;
        }
        cu_graph g = {B, cb, {0}};
        int cal0;
        if (capture_step(c, S, cb, d_lrows, B, g.exec, &cal0, err, errlen)) return -1;
        gi = c->n_graphs++;
        c->graphs[gi] = g;
    }
    if (graphs_launch(c, c->graphs[gi].exec, err, errlen)) return -1;
    on(c);
    return 0;
}

static int run_graph(cuda_impl *c, piece *pc, int np, int max_t, char *err, size_t errlen)
{
    int B, cb;
    v4_step S;
    const int32_t *d_lrows;
    if (graph_layout(c, c->fl[0].hmeta, pc, np, max_t, &B, &cb, &S, &d_lrows, err, errlen)) return -1;
    if (c->prof_ms) return run_profiled(c, pc, np, &S, cb, d_lrows, B, err, errlen);
    if (graph_enqueue(c, &S, B, cb, d_lrows, err, errlen)) return -1;
    if (scatter_logits(c, pc, np, B, 0, np, err, errlen) || sync_ranks(c, err, errlen)) return -1;
    for (int k = 0; k < np; k++) pc[k].sp->st->pos += pc[k].m;
    return 0;
}

/* Whether a decode step whose largest position is max_t replays a graph (its block tables fit the context bucket). */
static int graph_fits(const cuda_impl *c, int max_t)
{
    return c->use_graphs && !c->sublayers && pow2_at_least(max_t + 1) / c->pool->block_tokens + 1 <= c->max_blocks;
}

/* One sub-step: pieces of spans, at most cap tokens together, each continuing at its st->pos. */
static int run_pieces(cuda_impl *c, piece *pc, int np, char *err, size_t errlen)
{
    const int bt = c->pool->block_tokens;
    int maxb = 1, max_t = 0, decode = np <= GRAPH_MAX_BATCH;
    for (int k = 0; k < np; k++) {
        const v4_seq_state *s = pc[k].sp->st;
        const int nb = (s->pos + pc[k].m + bt - 1) / bt;
        if (nb > maxb) maxb = nb;
        if (s->pos + pc[k].m - 1 > max_t) max_t = s->pos + pc[k].m - 1;
        decode &= pc[k].m == 1 && pc[k].sp->logits_from == pc[k].a;
    }
    if (maxb > c->max_blocks) {
        snprintf(err, errlen, "cuda backend: a sequence needs %d pages, more than the context allows", maxb);
        return -1;
    }
    if (decode && graph_fits(c, max_t)) return run_graph(c, pc, np, max_t, err, errlen);

    v4_step S;
    int n, nl;
    const int32_t *d_lrows;
    const long used = build_layout(c, c->fl[0].hmeta, pc, np, 0, maxb, 0, &S, &n, &nl, &d_lrows, err, errlen);
    if (used < 0) return -1;
    c->lrows_at = (size_t)(d_lrows - c->dmeta);
    if (upload_layout(c, c->fl[0].hmeta, used, err, errlen) || enqueue_layers(c, &S, max_t, err, errlen)) return -1;
    on(c);
    for (int r0 = 0; r0 < nl; r0 += HEAD_ROWS) {
        const int m = nl - r0 < HEAD_ROWS ? nl - r0 : HEAD_ROWS;
        if (enqueue_head(c, d_lrows + r0, m, err, errlen) || scatter_logits(c, pc, np, np, r0, m, err, errlen)) return -1;
    }
    if (nl == 0) CK(cudaStreamSynchronize(c->st), "step");
    if (sync_ranks(c, err, errlen)) return -1;
    for (int k = 0; k < np; k++) pc[k].sp->st->pos += pc[k].m;
    return 0;
}

static int cuda_forward(sl_backend *be, sl_seq_span *in, int n_spans, char *err, size_t errlen)
{
    cuda_impl *c = be->impl;
    if (c->broken[0]) {
        snprintf(err, errlen, "%s", c->broken);
        return -1;
    }
    if (c->n_fl) {
        snprintf(err, errlen, "cuda backend: a step run with launched steps not collected");
        return -1;
    }
    on(c);   /* the thread that steps need not be the one that opened the backend */
    c->sublayers = be->sublayers;
    piece *pc = malloc((size_t)(n_spans > 0 ? n_spans : 1) * sizeof *pc);
    if (!pc) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
    for (int s = 0; s < n_spans; s++)
        if (in[s].n <= 0 || in[s].logits_from < 0 || in[s].logits_from > in[s].n || !in[s].st->open) {
            snprintf(err, errlen, "cuda backend: bad span %d (n %d, logits_from %d)", s, in[s].n, in[s].logits_from);
            free(pc);
            return -1;
        }
    /* sub-steps of at most cap tokens; a span that does not fit continues in the next one */
    int s = 0, a = 0, rc = 0;
    while (s < n_spans && !rc) {
        int np = 0, room = c->cap;
        while (s < n_spans && room > 0) {
            const int m = in[s].n - a < room ? in[s].n - a : room;
            pc[np++] = (piece){&in[s], a, m, -1};
            room -= m;
            a += m;
            if (a == in[s].n) { s++; a = 0; }
            else break;   /* the rest of this span goes to the next sub-step, after these tokens */
        }
        rc = run_pieces(c, pc, np, err, errlen);
    }
    free(pc);
    if (rc) ar_reset(c);   /* the ranks may have stopped at different all-reduces */
    return rc;
}

/* Pipelined decode (backend.h's launch and collect): a decode step's graph, then its sampling and the copies of its
 * tokens back into its flight's pinned buffers, and an event after them; collect waits for that event only, so the
 * step launched after it keeps the GPU busy meanwhile. A fed span's token is the one dtok holds for its sequence: the
 * embedding reads it there (build_layout's negative ids), since the newest launched step sampled into dtok and
 * nothing samples while it is outstanding. One GPU only: the ranks' all-reduces assume one step at a time. */
static void drop_flights(cuda_impl *c)
{
    if (c->n_fl) cudaStreamSynchronize(c->st);   /* their copies from the flights' pinned buffers done */
    c->n_fl = 0;
}

/* The row of st in the newest launched step, still outstanding (dtok's index of its sample: nothing else samples
 * while a launched step is), or -1. */
static int fed_row(const cuda_impl *c, const v4_seq_state *st, int guess)
{
    if (!c->n_fl) return -1;
    const cu_flight *F = &c->fl[(c->fl0 + c->n_fl - 1) % 2];
    if (guess < F->n && F->spans[guess].st == st) return guess;
    for (int i = 0; i < F->n; i++)
        if (F->spans[i].st == st) return i;
    return -1;
}

static int cuda_launch(sl_backend *be, sl_seq_span *in, int n, char *err, size_t errlen)
{
    cuda_impl *c = be->impl;
    if (c->broken[0]) {
        snprintf(err, errlen, "%s", c->broken);
        drop_flights(c);
        return -1;
    }
    c->sublayers = be->sublayers;
    if (n < 1 || n > GRAPH_MAX_BATCH || c->n_ranks > 1 || c->prof_ms) return 1;
    int max_t = 0;
    for (int s = 0; s < n; s++) {
        const sl_sampling *sm = in[s].sample;
        if (in[s].n != 1 || in[s].logits_from != 0 || !sm || sm->repetition_penalty != 1.0f || !in[s].st->open) return 1;
        if (in[s].st->pos > max_t) max_t = in[s].st->pos;
    }
    if (!graph_fits(c, max_t)) return 1;
    if (c->n_fl == 2) {
        snprintf(err, errlen, "cuda backend: a third launched step");
        drop_flights(c);
        return -1;
    }
    on(c);
    const int f = (c->fl0 + c->n_fl) % 2;
    cu_flight *F = &c->fl[f];
    piece pc[GRAPH_MAX_BATCH];
    for (int s = 0; s < n; s++) {
        pc[s] = (piece){&in[s], 0, 1, in[s].fed ? fed_row(c, in[s].st, s) : -1};
        if (in[s].fed && pc[s].fed < 0) {
            snprintf(err, errlen, "cuda backend: fed span %d has no launched step before it", s);
            drop_flights(c);
            return -1;
        }
    }
    int B, cb;
    v4_step S;
    const int32_t *d_lrows;
    int rc = graph_layout(c, F->hmeta, pc, n, max_t, &B, &cb, &S, &d_lrows, err, errlen) ||
             graph_enqueue(c, &S, B, cb, d_lrows, err, errlen);
    if (!rc) {
        for (int s = 0; s < n; s++) F->hsreq[s] = sample_req(s, &in[s], 0);   /* no penalty: no history */
        cudaError_t e = enqueue_sampling(c, F, n, 0);
        if (e == cudaSuccess) e = cudaEventRecord(F->done, c->st);
        if (e != cudaSuccess) {
            snprintf(err, errlen, "cuda backend: the launched step's sampling failed: %s", cudaGetErrorString(e));
            rc = -1;
        }
    }
    if (rc) {
        drop_flights(c);
        return -1;
    }
    for (int s = 0; s < n; s++) in[s].st->pos++;
    F->spans = in;
    F->n = n;
    c->n_fl++;
    return 0;
}

static int cuda_collect(sl_backend *be, char *err, size_t errlen)
{
    cuda_impl *c = be->impl;
    if (!c->n_fl) {
        snprintf(err, errlen, "cuda backend: collect without a launched step");
        return -1;
    }
    on(c);
    cu_flight *F = &c->fl[c->fl0];
    const cudaError_t e = cudaEventSynchronize(F->done);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: step failed: %s", cudaGetErrorString(e));
        drop_flights(c);
        return -1;
    }
    for (int s = 0; s < F->n; s++) {
        F->spans[s].token = F->htok[s];
        F->spans[s].logprob = F->hlp[s];
    }
    c->fl0 = (c->fl0 + 1) % 2;
    c->n_fl--;
    return 0;
}

int sl_backend_cuda_profile(sl_backend *be, double *fam_ms)
{
    cuda_impl *c = be->impl;
    on(c);
    if (fam_ms && !c->prof_ts) {
        if (cudaMalloc((void **)&c->prof_ts, PROF_MARKS * sizeof(uint64_t)) != cudaSuccess) return -1;
        if (!(c->prof_hts = malloc(PROF_MARKS * sizeof(uint64_t)))) return -1;
    }
    c->prof_ms = fam_ms;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int sl_backend_cuda_attention_ms(sl_backend *be, int iters, int *layer, double *ms, char *err, size_t errlen)
{
    cuda_impl *c = be->impl;
    const v4_config *cfg = &c->w->cfg;
    on(c);
    int l = 0;
    while (l < cfg->n_layers && c->L[l].ratio != 4) l++;
    if (l == cfg->n_layers || c->last_S.n < 1) {
        snprintf(err, errlen, "cuda backend: no CSA layer or no step run yet");
        return -1;
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0), "cudaEventCreate");
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        snprintf(err, errlen, "cuda backend: cudaEventCreate failed");
        return -1;
    }
    double *prof = c->prof_ms, t[5];
    c->prof_ms = NULL;   /* no stamps between these launches */
    err[0] = 0;
    int rc = enqueue_attention(c, &c->last_S, l, c->last_max_t, err, errlen);   /* warm */
    for (int k = 0; k < 5 && !rc; k++) {
        rc = cudaEventRecord(e0, c->st) != cudaSuccess;
        for (int i = 0; i < iters && !rc; i++) rc = enqueue_attention(c, &c->last_S, l, c->last_max_t, err, errlen);
        if (!rc) rc = cudaEventRecord(e1, c->st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess;
        float f = 0;
        if (!rc) rc = cudaEventElapsedTime(&f, e0, e1) != cudaSuccess;
        t[k] = f / (iters > 0 ? iters : 1);
    }
    c->prof_ms = prof;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc) {
        if (!err[0]) snprintf(err, errlen, "cuda backend: attention timing failed");
        return -1;
    }
    qsort(t, 5, sizeof *t, cmp_double);
    *layer = l;
    *ms = t[2];
    return 0;
}

int sl_backend_cuda_last_routing(sl_backend *be, int tokens, int32_t *experts)
{
    cuda_impl *c = be->impl;
    const size_t n = (size_t)tokens * c->w->cfg.n_active;
    const int last = c->w->cfg.n_layers - 1;
    if (!c->moe.ws_ok || !c->moe.fast[last] || c->deterministic || tokens < 1 || tokens > c->moe.W.max_tokens)
        return -1;   /* the generic MoE writes no routing there; deterministic steps route one token at a time */
    on(c);
    if (cudaStreamSynchronize(c->st) != cudaSuccess) return -1;
    return cudaMemcpy(experts, c->moe.W.idx, n * sizeof(int32_t), cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

int sl_backend_cuda_profile_launches(sl_backend *be, const char **what, double *us, int cap)
{
    cuda_impl *c = be->impl;
    const int n = c->prof_launches < cap ? c->prof_launches : cap;
    for (int k = 0; k < n; k++) {
        what[k] = c->prof_what[k];
        us[k] = c->prof_ns[k] * 1e-3;
    }
    return n;
}

int sl_backend_cuda_ranks(sl_backend *be, int *gpus)
{
    const cuda_impl *c = be->impl;
    if (gpus) {
        *gpus = 0;
        for (int r = 0; r < c->n_ranks; r++) *gpus += r == 0 || c->rk[r]->own_stream;
    }
    return c->n_ranks;
}

void sl_backend_cuda_set_deterministic(sl_backend *be, int det)
{
    cuda_impl *c = be->impl;
    if (c->deterministic != det)   /* the captured graphs have the other MoE and attention launches */
        for (int i = 0; i < c->n_graphs; i++) graphs_free(c, c->graphs[i].exec);
    if (c->deterministic != det) c->n_graphs = 0;
    for (int r = 0; r < c->n_ranks; r++) c->rk[r]->deterministic = det;
    on(c);
}

int sl_backend_cuda_fill_state(sl_backend *be, v4_seq_state *s, int pos, uint64_t seed, char *err, size_t errlen)
{
    cuda_impl *c = be->impl;
    const v4_config *cfg = &c->w->cfg;
    const int bt = c->pool->block_tokens;
    if (!s->open || s->n_blocks * bt < pos) {
        snprintf(err, errlen, "cuda backend: fill_state needs an open sequence with pages for %d tokens", pos);
        return -1;
    }
    for (int r = c->n_ranks - 1; r >= 0; r--) {   /* the same state on every rank */
        const cuda_impl *k = c->rk[r];
        on(k);
        uint8_t *slot = k->ar.slots + (size_t)s->slot * k->ar.slot_bytes;
        CK(cudaMemsetAsync(slot, 0, k->ar.slot_bytes, k->st), "state fill");
        for (int l = 0; l < cfg->n_layers; l++)
            CK(k->kv_fp8 ? v4_fill_kv8_rows(slot + k->L[l].ring_off, cfg->window, cfg->head_dim, cfg->rope_dim / 2,
                                            seed * 131 + (uint64_t)l, 1.0f, k->st)
                         : v4_fill_bf16((uint16_t *)(slot + k->L[l].ring_off), (size_t)cfg->window * cfg->head_dim,
                                        seed * 131 + (uint64_t)l, 1.0f, k->st),
               "state fill");
        for (int b = 0; b < (pos + bt - 1) / bt; b++) {
            uint8_t *page = k->ar.pages + (size_t)s->blocks[b] * k->ar.page_bytes;
            CK(v4_fill_bf16((uint16_t *)page, k->ar.page_bytes / 2, seed * 7919 + (uint64_t)b, 1.0f, k->st), "state fill");
            for (int l = 0; l < cfg->n_layers; l++) {   /* FP8 rows: codes and scales, not bf16 bits */
                const uint64_t sd = seed * 7919 + (uint64_t)b * 64 + (uint64_t)l;
                if (k->L[l].ratio == 4 && k->index_fp8)
                    CK(v4_fill_fp8_rows(page + k->L[l].ipage_off, bt / 4, cfg->index_head_dim, sd, 1.0f, k->st),
                       "state fill");
                if (k->L[l].ratio > 0 && k->kv_fp8)
                    CK(v4_fill_kv8_rows(page + k->L[l].page_off, bt / k->L[l].ratio, cfg->head_dim, cfg->rope_dim / 2,
                                        sd ^ 0x5bd1e995u, 1.0f, k->st),
                       "state fill");
            }
        }
        CK(cudaStreamSynchronize(k->st), "state fill");
    }
    s->pos = pos;
    return 0;
}

/* ----------------------------------------------------------------------------- create */
static void impl_free(cuda_impl *c)
{
    if (!c) return;
    on(c);
    if (c->st) cudaStreamSynchronize(c->st);
    if (c->sh.rank == 0) {   /* rank 0 owns the graphs and the other ranks */
        for (int i = 0; i < c->n_graphs; i++) graphs_free(c, c->graphs[i].exec);
        c->n_graphs = 0;
        for (int r = c->n_ranks - 1; r > 0; r--) impl_free(c->rk[r]);
        on(c);
        if (c->ar_fault) cudaFreeHost(c->ar_fault);
    }
    if (c->L)
        for (int l = 0; l < c->w->cfg.n_layers; l++) free_layer(&c->L[l]);
    free(c->L);
    gpu_moe_free(&c->moe);
    dense_weight_free(&c->head);
    void *dv[] = {c->embed, c->hc_head_fn, c->hc_head_base, c->hc_head_scale, c->norm, c->freq_main, c->freq_comp,
                  c->ar.slots, c->ar.pages, c->dmeta, c->X, c->f, c->post, c->comb, c->qkv, c->q, c->cmp,
                  c->scores, c->logits, c->xn, c->qr_b, c->q_b, c->kv_b, c->iq_b, c->o_b, c->u_b, c->y_b, c->sel,
                  c->att_scratch, c->hc_scratch, c->dsreq, c->dhist, c->dtok, c->dlp, c->probs, c->marks, c->f2,
                  c->fsum, c->ar_inbox, c->ar_epoch};
    for (size_t i = 0; i < sizeof dv / sizeof *dv; i++)
        if (dv[i]) cudaFree(dv[i]);
    if (c->prof_ts) cudaFree(c->prof_ts);
    free(c->prof_hts);
    if (c->hlogits) cudaFreeHost(c->hlogits);
    void *hv[] = {c->hhist, c->fl[0].hmeta, c->fl[0].hsreq, c->fl[0].htok, c->fl[0].hlp, c->fl[1].hmeta,
                  c->fl[1].hsreq, c->fl[1].htok, c->fl[1].hlp};
    for (size_t i = 0; i < sizeof hv / sizeof *hv; i++)
        if (hv[i]) cudaFreeHost(hv[i]);
    for (int f = 0; f < 2; f++)
        if (c->fl[f].done) cudaEventDestroy(c->fl[f].done);
    sl_sampler_free(&c->smp);
    if (c->st && c->own_stream) cudaStreamDestroy(c->st);
    for (int b = 0; b < N_BRANCH; b++) {
        if (c->side[b]) cudaStreamDestroy(c->side[b]);
        if (c->fork_ev[b]) cudaEventDestroy(c->fork_ev[b]);
        if (c->join_ev[b]) cudaEventDestroy(c->join_ev[b]);
    }
    free(c->slot_free);
    free(c);
}

static void cuda_destroy(sl_backend *be)
{
    if (!be) return;
    cuda_impl *c = be->impl;
    if (c && c->pool && c->pool->store == &c->store) v4_pool_set_store(c->pool, NULL, NULL);
    impl_free(c);
    free(be);
}

/* The memory of the engine's GPUs in use and in all, asked of the driver at most once a second (the engine's stats are
 * read after every step; the engine's own share is fixed at open, the rest is other processes'). */
static void cuda_memory(sl_backend *be, size_t *used, size_t *total)
{
    cuda_impl *c = be->impl;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double now = ts.tv_sec + ts.tv_nsec * 1e-9;
    if (now - c->mem_at >= 1.0) {
        c->mem_used = c->mem_total = 0;
        for (int r = 0; r < c->n_ranks; r++) {
            if (r && !c->rk[r]->own_stream) continue;   /* a GPU counted once */
            size_t fr = 0, tot = 0;
            on(c->rk[r]);
            if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) fr = tot = 0;
            c->mem_used += tot - fr;
            c->mem_total += tot;
        }
        on(c);
        c->mem_at = now;
    }
    *used = c->mem_used;
    *total = c->mem_total;
}

static const sl_backend_ops cuda_ops = {"cuda", cuda_forward, cuda_destroy, 1, cuda_memory, cuda_launch, cuda_collect};

static int load_globals(cuda_impl *c, char *err, size_t errlen)
{
    const v4_weights *w = c->w;
    const v4_config *cfg = &w->cfg;
    const int V = cfg->vocab_size, dim = cfg->dim, hc = cfg->hc_mult, half = cfg->rope_dim / 2;
    if (w->embed.fmt == QT_BF16) {
        c->embed_bf16 = 1;
        CK(cudaMalloc(&c->embed, (size_t)V * dim * 2), "embedding allocation");
        CK(cudaMemcpy(c->embed, w->embed.data, (size_t)V * dim * 2, cudaMemcpyHostToDevice), "embedding upload");
    } else {
        float *h = malloc((size_t)V * dim * sizeof(float));
        if (!h) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
        for (int r = 0; r < V; r++) qt_dequant_row(&w->embed, r, h + (size_t)r * dim);
        c->embed = up_f32(h, (size_t)V * dim);
        free(h);
        if (!c->embed) { snprintf(err, errlen, "cuda backend: out of GPU memory for the embedding"); return -1; }
    }
    if (c->sh.rank == 0 && up_dense(&c->head, &w->head, err, errlen, "head", -1)) return -1;   /* the head: rank 0 */
    c->hc_head_fn = up_f32(w->hc_head_fn, (size_t)hc * hc * dim);
    c->hc_head_base = up_f32(w->hc_head_base, (size_t)hc);
    c->hc_head_scale = up_f32(w->hc_head_scale, 1);
    c->norm = up_f32(w->norm, (size_t)dim);
    double fm[256], fc[256];
    v4_rope_inv_freq(&cfg->rope_main, cfg->rope_dim, fm);
    v4_rope_inv_freq(&cfg->rope_compress, cfg->rope_dim, fc);
    const int nh = half > 0 ? half : 1;
    CK(cudaMalloc((void **)&c->freq_main, nh * sizeof(double)), "RoPE tables");
    CK(cudaMalloc((void **)&c->freq_comp, nh * sizeof(double)), "RoPE tables");
    CK(cudaMemcpy(c->freq_main, fm, nh * sizeof(double), cudaMemcpyHostToDevice), "RoPE tables");
    CK(cudaMemcpy(c->freq_comp, fc, nh * sizeof(double), cudaMemcpyHostToDevice), "RoPE tables");
    if (!c->hc_head_fn || !c->hc_head_base || !c->hc_head_scale || !c->norm) {
        snprintf(err, errlen, "cuda backend: out of GPU memory for the head's parameters");
        return -1;
    }
    return 0;
}

/* The shapes the kernels take; one line naming the first the model breaks. */
static int check_config(const v4_config *c, char *err, size_t errlen)
{
    const char *why = NULL;
    if (c->hc_mult < 1 || c->hc_mult > 8) why = "hc_mult must be 1..8";
    else if (c->rope_dim % 2 || c->rope_dim / 2 > 256 || c->rope_dim > c->head_dim) why = "rope dims must be even, <= 512 and <= head_dim";
    else if (c->head_dim % 2 || c->head_dim > 1024) why = "head_dim must be even and <= 1024";
    else if (c->dim % 2) why = "dim must be even";
    else if (c->index_head_dim % 2 || c->index_head_dim > 1024) why = "index_head_dim must be even and <= 1024";
    else if (c->n_active > 16) why = "at most 16 active experts";
    else if (c->o_groups < 1 || (c->n_heads * c->head_dim) % c->o_groups) why = "o_groups must divide heads x head_dim";
    if (why) { snprintf(err, errlen, "cuda backend: unsupported config: %s", why); return -1; }
    return 0;
}

/* Rank k's weights and buffers on its GPU: the globals, its share of every layer and of every expert, its step
 * buffers. */
static int load_rank(cuda_impl *k, char *err, size_t errlen)
{
    const v4_weights *w = k->w;
    on(k);
    if (cudaDeviceGetAttribute(&k->n_sms, cudaDevAttrMultiProcessorCount, k->dev) != cudaSuccess || k->n_sms < 1)
        k->n_sms = 132;
    k->L = calloc((size_t)w->cfg.n_layers, sizeof *k->L);
    if (!k->L) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
    if (k->own_stream) {
        const cudaError_t ce = cudaStreamCreateWithFlags(&k->st, cudaStreamNonBlocking);
        if (ce != cudaSuccess) {
            snprintf(err, errlen, "cuda backend: cannot use CUDA device %d (%s)", k->dev, cudaGetErrorString(ce));
            return -1;
        }
    }
    for (int b = 0; b < N_BRANCH; b++)
        if (cudaStreamCreateWithFlags(&k->side[b], cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&k->fork_ev[b], cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&k->join_ev[b], cudaEventDisableTiming) != cudaSuccess) {
            snprintf(err, errlen, "cuda backend: cannot create a stream or event on CUDA device %d", k->dev);
            return -1;
        }
    if (load_globals(k, err, errlen)) return -1;
    for (int l = 0; l < w->cfg.n_layers; l++)
        if (load_layer(k, l, err, errlen)) return -1;
    if (gpu_moe_load(&k->moe, w, &k->sh, k->cap, err, errlen) || alloc_step(k, err, errlen)) return -1;
    if (k->ar_peer) {
        CK(cudaMalloc((void **)&k->ar_inbox, V4_AR_BLOCKS * V4_AR_MAX_RANKS * sizeof(unsigned)), "all-reduce flags");
        CK(cudaMalloc((void **)&k->ar_epoch, V4_AR_BLOCKS * sizeof(unsigned)), "all-reduce flags");
        CK(cudaMemset(k->ar_inbox, 0, V4_AR_BLOCKS * V4_AR_MAX_RANKS * sizeof(unsigned)), "all-reduce flags");
        CK(cudaMemset(k->ar_epoch, 0, V4_AR_BLOCKS * sizeof(unsigned)), "all-reduce flags");
    }
    k->part[0] = k->sum[0] = k->part[1] = k->sum[1] = k->f;   /* one rank, or ranks summing in place */
    if (k->ar_peer) {   /* the two sublayers' inputs alternate; the sums land apart (v4_allreduce_peer) */
        k->part[1] = k->f2;
        k->sum[0] = k->sum[1] = k->fsum;
    }
    k->flast = k->sum[1];
    return 0;
}

/* Whether every pair of dev[0..n) reaches the other's memory; enables it. 0, or -1 with err. */
static int peer_access(const int *dev, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int ok = 0;
            if (i == j) continue;
            if (cudaDeviceCanAccessPeer(&ok, dev[i], dev[j]) != cudaSuccess || !ok) {
                snprintf(err, errlen, "cuda backend: GPUs %d and %d cannot reach each other's memory (no peer access); the "
                         "all-reduce between ranks reads it directly", dev[i], dev[j]);
                return -1;
            }
            cudaSetDevice(dev[i]);
            const cudaError_t ce = cudaDeviceEnablePeerAccess(dev[j], 0);
            if (ce == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
            else if (ce != cudaSuccess) {
                snprintf(err, errlen, "cuda backend: peer access from GPU %d to %d: %s", dev[i], dev[j],
                         cudaGetErrorString(ce));
                return -1;
            }
        }
    return 0;
}

/* Whether the model splits n ways: the plan divides (v4_shard_plan); keep_fast: and a model whose experts fit the fast
 * MoE kernels still fits them split (each share of an expert's width a multiple of 128, which keeps the FP8 shared
 * expert's share on its blocks; else the generic MoE takes them, in fp32, which only small models afford). A dense
 * weight whose share is off its FP8 blocks goes up in bf16 (up_dense_part). 0, or -1 with one line in err. */
static int split_fits(const v4_weights *w, int shared_inter, int n, int keep_fast, char *err, size_t errlen)
{
    const v4_config *c = &w->cfg;
    v4_shard sh, whole;
    char why[256];
    if (v4_shard_plan(c, shared_inter, n, 0, &sh, why, sizeof why)) {
        snprintf(err, errlen, "cuda backend: %.220s", why);
        return -1;
    }
    v4_shard_plan(c, shared_inter, 1, 0, &whole, why, sizeof why);
    if (keep_fast && !gpu_moe_fast_fits(w, &whole, why, sizeof why) && gpu_moe_fast_fits(w, &sh, why, sizeof why)) {
        snprintf(err, errlen, "%.200s (the model split %d ways; whole, it fits)", why, n);
        return -1;
    }
    return 0;
}

/* The GPUs the ranks run on: opts->devices; by default the most visible GPUs (at most SL_MAX_RANKS) that the model
 * splits across keeping its fast MoE kernels (split_fits) and that reach each other's memory (else GPU 0 alone,
 * saying so). Distinct GPUs must
 * reach each other's memory (the all-reduce reads its peers' partial sums). Returns the count and *distinct, or -1
 * with err. */
static int pick_devices(const sl_cuda_opts *o, const v4_weights *w, int shared_inter, int *dev, int *distinct,
                        char *err, size_t errlen)
{
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev < 1) {
        snprintf(err, errlen, "cuda backend: no CUDA device available (%s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return -1;
    }
    const int given = o && o->n_devices > 0;
    if (given && o->n_devices > SL_MAX_RANKS) {
        snprintf(err, errlen, "cuda backend: %d GPUs given; at most %d", o->n_devices, SL_MAX_RANKS);
        return -1;
    }
    int n = given ? o->n_devices : ndev < SL_MAX_RANKS ? ndev : SL_MAX_RANKS;
    for (int r = 0; r < n; r++) {
        dev[r] = given ? o->devices[r] : r;
        if (dev[r] < 0 || dev[r] >= ndev) {
            snprintf(err, errlen, "cuda backend: engine.devices names GPU %d; this machine has %d (0..%d)", dev[r], ndev,
                     ndev - 1);
            return -1;
        }
    }
    if (!given) {   /* the most GPUs the model splits across */
        char why[256];
        while (n > 1 && split_fits(w, shared_inter, n, 1, why, sizeof why)) n--;
    } else if (n > 1 && split_fits(w, shared_inter, n, 0, err, errlen)) {
        return -1;
    }
    *distinct = n > 1 && dev[1] != dev[0];
    if (*distinct && peer_access(dev, n, err, errlen)) {
        if (given) return -1;
        fprintf(stderr, "%s: running on GPU %d alone (engine.devices chooses)\n", err, dev[0]);
        n = 1;
        *distinct = 0;
    }
    cudaSetDevice(dev[0]);
    return n;
}

sl_backend *sl_backend_cuda_create(const v4_weights *w, v4_state_pool *pool, const sl_cuda_opts *o, char *err,
                                   size_t errlen)
{
    if (check_config(&w->cfg, err, errlen)) return NULL;
    if (o && o->index_fp8 && w->cfg.index_head_dim % 64) {
        snprintf(err, errlen, "cuda backend: FP8 index keys need index_head_dim (%d) a multiple of 64",
                 w->cfg.index_head_dim);
        return NULL;
    }
    if (o && o->kv_fp8 && !v4_kv8_ok(w->cfg.head_dim, w->cfg.rope_dim / 2)) {
        snprintf(err, errlen, "cuda backend: FP8 KV needs head_dim - rope_dim (%d - %d) a positive multiple of 64 (at "
                 "most 1024) and rope_dim a multiple of 8", w->cfg.head_dim, w->cfg.rope_dim);
        return NULL;
    }
    double frac = o ? o->gpu_memory_fraction : 0;
    if (frac == 0) frac = 0.9;
    if (!(frac > 0.05 && frac <= 1.0)) {
        snprintf(err, errlen, "cuda backend: gpu_memory_fraction %g outside (0.05, 1]", frac);
        return NULL;
    }
    int dev[SL_MAX_RANKS], distinct = 0;
    const int shared_inter = w->cfg.n_shared_experts > 0 && w->layers[0].shared.w1.data ? w->layers[0].shared.w1.rows : 0;
    const int n = pick_devices(o, w, shared_inter, dev, &distinct, err, errlen);
    if (n < 0) return NULL;
    sl_backend *be = calloc(1, sizeof *be);
    cuda_impl *c = NULL;
    if (!be) {
        snprintf(err, errlen, "cuda backend: out of memory");
        return NULL;
    }
    for (int r = 0; r < n; r++) {
        cuda_impl *k = calloc(1, sizeof *k);
        if (!k) { snprintf(err, errlen, "cuda backend: out of memory"); goto fail; }
        if (!r) c = k;
        c->rk[c->n_ranks++] = k;
        k->w = w;
        k->pool = pool;
        k->dev = dev[r];
        k->cap = STEP_TOKENS;
        k->mem_fraction = frac;
        k->index_fp8 = o && o->index_fp8;
        k->kv_fp8 = o && o->kv_fp8;
        k->use_graphs = 1;
        k->own_stream = r == 0 || distinct;
        k->ar_peer = distinct;
        char why[256];
        if (v4_shard_plan(&w->cfg, shared_inter, n, r, &k->sh, why, sizeof why)) {
            k->sh.rank = r;
            snprintf(err, errlen, "cuda backend: %s", why);
            goto fail;
        }
    }
    if (distinct && cudaHostAlloc((void **)&c->ar_fault, sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable) !=
                        cudaSuccess) {
        snprintf(err, errlen, "cuda backend: cannot allocate the all-reduce's fault word");
        goto fail;
    }
    if (c->ar_fault) *c->ar_fault = 0;
    for (int r = 0; r < n; r++) {
        cuda_impl *k = c->rk[r];
        if (!k->own_stream) k->st = c->st;   /* every rank on one GPU: one stream, in rank order */
        if (load_rank(k, err, errlen)) goto fail;
    }
    for (int r = 0; r < n; r++) {   /* what room is left, once every rank's weights are in */
        cuda_impl *k = c->rk[r];
        on(k);
        if (gpu_moe_add_shared_bf16(&k->moe, w, reserve_bytes(k), err, errlen)) goto fail;
    }
    on(c);
    if (alloc_state(c, err, errlen)) goto fail;
    for (int r = n - 1; r >= 0; r--) {
        on(c->rk[r]);
        const cudaError_t ce = cudaDeviceSynchronize();
        if (ce != cudaSuccess) {
            snprintf(err, errlen, "cuda backend: loading the weights failed on GPU %d (%s)", c->rk[r]->dev,
                     cudaGetErrorString(ce));
            goto fail;
        }
    }
    be->ops = &cuda_ops;
    be->w = w;
    be->pool = pool;
    be->impl = c;
    return be;
fail:
    if (c && pool->store == &c->store) v4_pool_set_store(pool, NULL, NULL);
    impl_free(c);
    free(be);
    return NULL;
}

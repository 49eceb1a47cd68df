/* bench_decode.c — `sluice-bench decode`: one V4 decode step of the cuda backend on a synthetic
 * V4-Flash model, against the bytes the step must read (bench/README.md, "decode").
 *
 * Per row (batch B, context C): B sequences with the state of C tokens (batch 1: prefilled, C random tokens
 * through the forward; larger batches: written directly, sl_backend_cuda_fill_state: window, compressed entries
 * and indexer keys random at the right counts), then decode
 * steps of one token each through the backend's forward (the whole step: every layer, the head, greedy
 * sampling on the device, the token ids back to the host); the median of the timed steps. The byte floor, per layer: the dense
 * weights in the checkpoint's dtypes, the shared expert, the expected routed experts touched under
 * uniform top-6 routing (256 (1 - (250/256)^B)) at 0.53125 (MXFP4) or 0.5625 (NVFP4) bytes per weight,
 * and per sequence the bf16 window (128 x 512), the selected CSA entries (min(512, C/4) x 512 bf16)
 * with the CSA index keys (C/4 x 128, FP8) or all HCA entries (C/128 x 512 bf16) -- with --kv fp8 the window and
 * the entries as the FP8 KV rows stored (592 bytes a key); plus the bf16 head
 * once per step; over the read ceiling measured in the same process. Each row also reads back the experts the
 * last layer routed the last timed step's tokens to (the tokens-per-expert histogram: the synthetic model's default
 * routing is uniform, so the count read should match the model's) and times one CSA layer's attention path alone
 * (sl_backend_cuda_attention_ms) against its bytes and the peer's PyTorch path (decode_peer.py --attention).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <jansson.h>

#include "backend.h"
#include "moe_bench_kernels.h"
#include "synthetic.h"
#include "v4_ops.h"
#include "bench_util.h"

static double read_ceiling_tb(void)
{
    const size_t n = (size_t)4 << 30;
    void *p = NULL;
    unsigned *sink = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess || cudaMalloc((void **)&sink, 4096) != cudaSuccess) return 0;
    cudaMemset(p, 0x5A, n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double tv[7];
    moe_hbm_read(p, n, sink, 0);
    for (int i = 0; i < 7; i++) {
        float ms;
        cudaEventRecord(e0, 0);
        moe_hbm_read(p, n, sink, 0);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        tv[i] = ms;
    }
    qsort(tv, 7, sizeof *tv, cmp_d);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(p);
    cudaFree(sink);
    return n / (tv[3] * 1e-3) / 1e12;
}

/* The byte floor of one decode step (see the header) on rank 0 of n (engine/shard.h: the query heads' projections
 * and every expert split n ways; wq_a, wkv, the compressors, the indexer, mHC, the router and the state whole on
 * each GPU; the head on rank 0). */
static double floor_bytes(const v4_config *c, int fp4_nv, int kv8, int B, long ctx, int n, double *experts_touched)
{
    const double kr = (double)v4_kv_row_bytes(c->head_dim, c->rope_dim / 2, kv8);   /* one key row */
    const double D = c->dim, hd = c->head_dim, H = c->n_heads, ql = c->q_lora_rank, G = c->o_groups, ol = c->o_lora_rank;
    const double dI = c->index_head_dim, nI = c->index_n_heads, I = c->moe_inter, E = c->n_routed_experts;
    const double hc = c->hc_mult, nmix = (2 + hc) * hc;
    const double touched = E * (1.0 - pow((E - c->n_active) / E, B));
    *experts_touched = touched;
    double bytes = (double)c->vocab_size * D * 2;   /* head, bf16 */
    for (int l = 0; l < c->n_layers; l++) {
        const int r = c->compress_ratio[l];
        double w = ql * D + hd * D + (H * hd * ql + G * ol * (H * hd / G) + D * G * ol) / n;   /* FP8 */
        w += 2 * nmix * hc * D * 4 + E * D * 4;                                                  /* mHC, router fp32 */
        w += 3 * I * D / n;                                                                        /* shared FP8 */
        w += touched * 3 * I * D * (fp4_nv ? 0.5625 : 0.53125) / n;
        double per_seq = c->window * kr;
        if (r == 4) {
            w += 2 * 2 * hd * D * 2 + 2 * 2 * dI * D * 2 + nI * D * 2 + nI * dI * ql;     /* compressors bf16, iwq_b */
            const double n = ctx / 4;
            per_seq += (n < c->index_topk ? n : c->index_topk) * kr + n * dI;
        } else if (r > 0) {
            w += 2 * hd * D * 2;
            per_seq += (double)(ctx / r) * kr;
        }
        bytes += w + per_seq * B;
    }
    return bytes;
}

/* The bytes one CSA layer's attention path reads and writes for B rows at context ctx, in the dtypes stored: per row
 * the window and the selected entries (bf16 [hd], or FP8 KV rows), every index key (bf16 [dI], or an FP8 row: dI codes
 * and their scale word), the queries, the indexer's head weights (fp32) and the output (bf16). */
static double attention_bytes(const v4_config *c, int B, long ctx, int index_fp8, int kv8)
{
    const double hd = c->head_dim, H = c->n_heads, dI = c->index_head_dim, nI = c->index_n_heads, n = (double)(ctx / 4);
    const double win = ctx + 1 < c->window ? ctx + 1 : c->window, sel = n < c->index_topk ? n : c->index_topk;
    const double key = index_fp8 ? dI + 4 : dI * 2, kr = (double)v4_kv_row_bytes(c->head_dim, c->rope_dim / 2, kv8);
    return B * ((win + sel) * kr + n * key + 2 * H * hd * 2 + nI * dI * 2 + nI * 4);
}

/* The peer's ms per layer at (batch, context) from decode_peer.py's JSON (its context grows by one a step, so
 * the row whose context is nearest), else null. */
static json_t *peer_ms_per_layer(json_t *peer, int batch, long ctx)
{
    json_t *rows = json_object_get(peer, "rows"), *best = NULL, *r;
    size_t i;
    long bd = -1;
    json_array_foreach(rows, i, r) {
        const long c = (long)json_integer_value(json_object_get(r, "context")), d = labs(c - ctx);
        if (json_integer_value(json_object_get(r, "batch")) == batch && json_is_number(json_object_get(r, "ms_per_layer")) &&
            d <= 64 && (bd < 0 || d < bd)) {
            best = r;
            bd = d;
        }
    }
    return best ? json_real(json_number_value(json_object_get(best, "ms_per_layer"))) : json_null();
}

#define MAX_LOAD 256   /* the histogram's last bin holds this many tokens or more */

/* The peer's time for one CSA layer's attention path at (batch, context) from decode_peer.py's "attention" rows,
 * else -1. */
static double peer_attention_ms(json_t *peer, int batch, long ctx)
{
    json_t *r;
    size_t i;
    json_array_foreach(json_object_get(peer, "attention"), i, r) {
        if (json_integer_value(json_object_get(r, "batch")) == batch &&
            json_integer_value(json_object_get(r, "context")) == ctx && json_is_number(json_object_get(r, "ms")))
            return json_number_value(json_object_get(r, "ms"));
    }
    return -1;
}

/* Fill st with the state of an n-token prompt of random ids: one forward of n tokens (the backend runs it in
 * sub-steps), no logits. 0 or -1 with err. */
static int prefill(sl_backend *be, v4_seq_state *st, int n, int V, char *err, size_t errlen)
{
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    if (!tok) { snprintf(err, errlen, "out of memory"); return -1; }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)V);
    }
    sl_seq_span sp = {.tokens = tok, .n = n, .st = st, .logits_from = n};
    const int rc = be->ops->forward(be, &sp, 1, err, errlen);
    free(tok);
    return rc;
}

/* The last profiled step's launches summed by name, largest first. */
static void print_launches(sl_backend *be, int B, long C)
{
    enum { CAP = 4096, NAMES = 64 };
    static const char *what[CAP];
    static double us[CAP];
    const char *name[NAMES];
    double tot[NAMES];
    int cnt[NAMES], nn = 0;
    const int n = sl_backend_cuda_profile_launches(be, what, us, CAP);
    double all = 0;
    for (int k = 0; k < n; k++) {
        int j = 0;
        while (j < nn && strcmp(name[j], what[k] ? what[k] : "?")) j++;
        if (j == nn && nn < NAMES) { name[nn] = what[k] ? what[k] : "?"; tot[nn] = 0; cnt[nn++] = 0; }
        if (j < nn) { tot[j] += us[k]; cnt[j]++; }
        all += us[k];
    }
    printf("launches of one step at batch %d, context %ld: %d launches, %.1f us\n", B, C, n, all);
    for (int a = 0; a < nn; a++) {   /* largest first */
        int best = a;
        for (int b = a + 1; b < nn; b++)
            if (tot[b] > tot[best]) best = b;
        const char *tn = name[a]; name[a] = name[best]; name[best] = tn;
        const double tt = tot[a]; tot[a] = tot[best]; tot[best] = tt;
        const int tc = cnt[a]; cnt[a] = cnt[best]; cnt[best] = tc;
        printf("  %-36s %4d x %7.2f us = %8.1f us\n", name[a], cnt[a], tot[a] / cnt[a], tot[a]);
    }
}

typedef struct {
    int batch;
    long ctx;
    double ms, bytes, touched;
    double att_ms, att_bytes;         /* one CSA layer's attention path alone (sl_backend_cuda_attention_ms); ms < 0: none */
    double prefill_ms;                /* batch 1: the prefill that filled the state; < 0: written directly */
    int read, max_load;               /* measured at the last MoE layer of the last timed step: experts with a token, */
    int by_load[MAX_LOAD + 1];        /* and how many experts got each number of tokens (the tokens-per-expert histogram) */
    double split[SL_FAM_N + 1];   /* per kernel family, the median of SPLIT_STEPS profiled steps; [SL_FAM_N]: the
                                     timed step beyond them (graph launch, layout upload, sampling, host work) */
} row_out;

#define SPLIT_STEPS 5

int bench_decode(int argc, char **argv)
{
    const char *spec = "v4-flash:layers=4", *out_path = NULL, *commit = "unknown", *peer_path = NULL;
    int batches[16] = {1, 4, 16, 64}, nb = 4, reps = 10, launches = 0;
    sl_cuda_opts copts = {0};
    long ctxs[8] = {8192}, nc = 1;
    char cmd[1024] = "sluice-bench";   /* the command as given (before strtok splits the lists in place) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "--commit")) { i++; continue; }
        strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
        strncat(cmd, argv[i], sizeof cmd - strlen(cmd) - 1);
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--synthetic") && i + 1 < argc) spec = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--commit") && i + 1 < argc) commit = argv[++i];
        else if (!strcmp(argv[i], "--peer") && i + 1 < argc) peer_path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--launches")) launches = 1;
        else if (!strcmp(argv[i], "--index-keys") && i + 1 < argc && (!strcmp(argv[i + 1], "fp8") || !strcmp(argv[i + 1], "bf16")))
            copts.index_fp8 = !strcmp(argv[++i], "fp8");
        else if (!strcmp(argv[i], "--kv") && i + 1 < argc && (!strcmp(argv[i + 1], "fp8") || !strcmp(argv[i + 1], "bf16")))
            copts.kv_fp8 = !strcmp(argv[++i], "fp8");
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            char derr[256];
            copts.n_devices = sl_parse_devices(argv[++i], copts.devices, derr, sizeof derr);
            if (copts.n_devices < 0) { fprintf(stderr, "sluice-bench decode: %s\n", derr); return 2; }
        }
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            nb = 0;
            for (char *t = strtok(argv[++i], ","); t && nb < 16; t = strtok(NULL, ",")) batches[nb++] = atoi(t);
        } else if (!strcmp(argv[i], "--contexts") && i + 1 < argc) {
            nc = 0;
            for (char *t = strtok(argv[++i], ","); t && nc < 8; t = strtok(NULL, ",")) ctxs[nc++] = atol(t);
        } else {
            fprintf(stderr, "usage: sluice-bench decode [--synthetic SPEC] [--batches 1,4,16,64] [--contexts 8192,65536] "
                            "[--reps N] [--launches] [--devices 0,1] [--index-keys bf16|fp8] [--kv bf16|fp8] [--out FILE] "
                            "[--commit SHA] [--peer PEER.json]\n"
                            "--launches: each row's profiled step by launch (summed over the layers)\n"
                            "--index-keys: how the indexer's keys are stored (default bf16)\n"
                            "--kv: how the attention's keys are stored (default bf16; fp8: DeepSeek's FP8 KV)\n"
                            "PEER.json: bench/decode_peer.py --out's rows (batch, context, ms_per_layer)\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) { fprintf(stderr, "sluice-bench decode: no CUDA device\n"); return 77; }
    const double ceiling = read_ceiling_tb();
    printf("%s, read ceiling %.3f TB/s\n", prop.name, ceiling);

    char err[512];
    double t0 = now_ms();
    v4_weights w;
    if (v4_weights_synthetic(spec, 0, &w, err, sizeof err)) { fprintf(stderr, "sluice-bench decode: %s\n", err); return 1; }
    const v4_config *cfg = &w.cfg;
    v4_state_pool pool;
    if (v4_pool_init(&pool, cfg, (size_t)120 << 30, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    sl_backend *be = sl_backend_cuda_create(&w, &pool, &copts, err, sizeof err);
    if (!be) { fprintf(stderr, "sluice-bench decode: %s\n", err); return 1; }
    int n_gpus = 1;
    const int n_dev = sl_backend_cuda_ranks(be, &n_gpus);   /* the ranks the backend chose */
    if (n_dev > 1)
        printf("the model split %d ways (engine/shard.h) on %d GPU%s; floors are rank 0's bytes\n", n_dev, n_gpus,
               n_gpus > 1 ? "s" : "");
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    printf("synthetic %s: %d layers, %s experts, loaded in %.1f s; state budget %.1f GiB, GPU %.1f of %.1f GiB free\n",
           spec, cfg->n_layers, w.expert_format == QT_NVFP4 ? "nvfp4" : "mxfp4", (now_ms() - t0) / 1e3,
           pool.budget / 1073741824.0, fr / 1073741824.0, tot / 1073741824.0);
    for (int ci = 0; ci < nc && pool.store; ci++) {   /* the layout's bytes: the fixed part and the pages of C tokens */
        const double seq = (double)pool.store->fixed_bytes +
                           (double)((ctxs[ci] + pool.block_tokens - 1) / pool.block_tokens) * pool.store->page_bytes;
        printf("state of one sequence at context %ld (%s KV): %.1f MB; the budget holds %.0f of them\n", ctxs[ci],
               copts.kv_fp8 ? "FP8" : "bf16", seq / 1e6, floor(pool.budget / seq));
    }

    const int V = cfg->vocab_size, steps = reps + 2;
    const sl_sampling greedy = {.top_p = 1.0f, .repetition_penalty = 1.0f, .max_tokens = 1};   /* on the device */
    row_out rows[128];
    int nr = 0, att_layer = -1;
    printf("%6s %7s %9s %9s %10s %8s %9s %9s\n", "batch", "context", "ms", "ms/layer", "floor GB", "% ceil", "tok/s",
           "experts");   /* experts: the byte model's expected count / the count the last layer read */
    for (int ci = 0; ci < nc; ci++)
        for (int bi = 0; bi < nb; bi++) {
            const int B = batches[bi];
            const long C = ctxs[ci];
            v4_seq_state *st = calloc((size_t)B, sizeof *st);
            int32_t *tok = malloc((size_t)B * sizeof *tok);
            sl_seq_span *sp = calloc((size_t)B, sizeof *sp);
            int ok = st && tok && sp, opened = 0;
            double fill_ms = 0;
            for (int b = 0; b < B && ok; b++) {
                ok = !v4_seq_init(&pool, &st[b]) && !v4_seq_reserve(&pool, &st[b], (int)C + steps + SPLIT_STEPS + 1);
                opened += ok;
                if (ok && B == 1) {   /* batch 1: the state a real prompt leaves, by prefilling C random tokens */
                    const double a = now_ms();
                    if (prefill(be, &st[b], (int)C, V, err, sizeof err)) {
                        fprintf(stderr, "%s\n", err);
                        ok = 0;
                    }
                    fill_ms = now_ms() - a;
                } else if (ok && sl_backend_cuda_fill_state(be, &st[b], (int)C, (uint64_t)(b + 1), err, sizeof err)) {
                    fprintf(stderr, "%s\n", err);
                    ok = 0;
                }
            }
            if (!ok) {
                printf("%6d %7ld  does not fit (state for %d of %d sequences)\n", B, C, opened, B);
            } else {
                double ms[64];
                int n_ok = 0;
                for (int s = 0; s < steps; s++) {
                    for (int b = 0; b < B; b++) {
                        tok[b] = (int32_t)((7919u * (unsigned)(b + 1) + 104729u * (unsigned)s) % (unsigned)V);
                        sp[b] = (sl_seq_span){.tokens = &tok[b], .n = 1, .st = &st[b], .sample = &greedy};
                    }
                    const double a = now_ms();
                    if (be->ops->forward(be, sp, B, err, sizeof err)) { fprintf(stderr, "%s\n", err); break; }
                    if (s >= 2 && n_ok < 64) ms[n_ok++] = now_ms() - a;
                }
                double att_ms = -1;
                if (n_ok && sl_backend_cuda_attention_ms(be, 20, &att_layer, &att_ms, err, sizeof err)) att_ms = -1;
                /* the routing of the last timed step's tokens at the last layer */
                const int E = cfg->n_routed_experts, K = cfg->n_active;
                int32_t *ids = malloc((size_t)B * K * sizeof *ids);
                int *load = calloc((size_t)E, sizeof *load), routed = 0;
                if (ids && load && n_ok && !sl_backend_cuda_last_routing(be, B, ids)) {
                    routed = 1;
                    for (int i = 0; i < B * K; i++)
                        if (ids[i] >= 0 && ids[i] < E) load[ids[i]]++;
                }
                /* the split: steps captured afresh with an event after every launch (sl_backend_cuda_profile) */
                double fam[SL_FAM_N] = {0}, fs[SL_FAM_N][SPLIT_STEPS];
                int n_split = 0;
                const int prof = !sl_backend_cuda_profile(be, fam);
                for (int s = 0; s < SPLIT_STEPS && n_ok && prof; s++) {
                    for (int b = 0; b < B; b++) {
                        tok[b] = (int32_t)((7919u * (unsigned)(b + 1) + 104729u * (unsigned)(s + steps)) % (unsigned)V);
                        sp[b] = (sl_seq_span){.tokens = &tok[b], .n = 1, .st = &st[b], .sample = &greedy};
                    }
                    if (be->ops->forward(be, sp, B, err, sizeof err)) { fprintf(stderr, "%s\n", err); break; }
                    for (int f = 0; f < SL_FAM_N; f++) fs[f][n_split] = fam[f];
                    n_split++;
                }
                sl_backend_cuda_profile(be, NULL);
                if (launches && n_split) print_launches(be, B, C);
                if (n_ok) {
                    qsort(ms, (size_t)n_ok, sizeof *ms, cmp_d);
                    row_out *r = &rows[nr++];
                    for (int f = 0; f < SL_FAM_N; f++) {
                        qsort(fs[f], (size_t)n_split, sizeof(double), cmp_d);
                        r->split[f] = n_split ? fs[f][n_split / 2] : 0;
                    }
                    r->batch = B;
                    r->ctx = C;
                    r->prefill_ms = B == 1 ? fill_ms : -1;
                    r->ms = ms[n_ok / 2];
                    r->split[SL_FAM_N] = r->ms;
                    for (int f = 0; f < SL_FAM_N; f++) r->split[SL_FAM_N] -= r->split[f];
                    r->bytes = floor_bytes(cfg, w.expert_format == QT_NVFP4, copts.kv_fp8, B, C, n_dev, &r->touched);
                    r->att_ms = att_ms;
                    r->att_bytes = attention_bytes(cfg, B, C, copts.index_fp8, copts.kv_fp8);
                    memset(r->by_load, 0, sizeof r->by_load);
                    r->read = r->max_load = -1;
                    if (routed) {
                        r->read = r->max_load = 0;
                        for (int e = 0; e < E; e++) {
                            r->by_load[load[e] < MAX_LOAD ? load[e] : MAX_LOAD]++;
                            r->read += load[e] > 0;
                            if (load[e] > r->max_load) r->max_load = load[e];
                        }
                    }
                    const double floor_ms = r->bytes / (ceiling * 1e12) * 1e3;
                    printf("%6d %7ld %9.3f %9.4f %10.2f %8.1f %9.0f %5.1f/%-3d\n", B, C, r->ms, r->ms / cfg->n_layers,
                           r->bytes / 1e9, 100.0 * floor_ms / r->ms, B / (r->ms * 1e-3), r->touched, r->read);
                    if (r->prefill_ms >= 0)
                        printf("%16s state: a prefill of %ld tokens, %.2f s\n", "", C, r->prefill_ms / 1e3);
                    if (routed) {   /* experts by tokens routed to them: "load:experts" */
                        printf("%16s tokens per expert, last layer:", "");
                        for (int k = 0; k <= (r->max_load < MAX_LOAD ? r->max_load : MAX_LOAD); k++)
                            if (r->by_load[k]) printf(" %d:%d", k, r->by_load[k]);
                        printf("\n");
                    }
                    fflush(stdout);
                }
                free(ids);
                free(load);
            }
            for (int b = 0; b < B && st; b++)
                if (st[b].open) v4_seq_free(&pool, &st[b]);
            free(st);
            free(tok);
            free(sp);
        }

    /* step = fixed + per_request * batch, least squares over the rows at the first context */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int n = 0;
    for (int i = 0; i < nr; i++)
        if (rows[i].ctx == ctxs[0]) {
            sx += rows[i].batch; sy += rows[i].ms; sxx += (double)rows[i].batch * rows[i].batch;
            sxy += rows[i].batch * rows[i].ms; n++;
        }
    double slope = n > 1 ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0, icpt = n ? (sy - slope * sx) / n : 0;
    printf("fit at context %ld: step = %.3f ms + %.4f ms per request (a production V4 deployment on 8x RTX PRO 6000 "
           "reported 18 ms + 1.05 ms per request)\n", ctxs[0], icpt, slope);
    printf("split of one step by kernel family, ms (context %ld; launch gaps inside each family included, branches run\n"
           "in line; other: the timed step beyond them: graph launch, layout upload, sampling, host work, less the\n"
           "branches' overlap):\n%-12s", ctxs[0],
           "batch");
    for (int i = 0; i < nr; i++)
        if (rows[i].ctx == ctxs[0]) printf(" %9d", rows[i].batch);
    for (int f = 0; f <= SL_FAM_N; f++) {
        printf("\n%-12s", f < SL_FAM_N ? sl_cuda_family_names[f] : "other");
        for (int i = 0; i < nr; i++) {
            if (rows[i].ctx != ctxs[0]) continue;
            printf(" %9.3f", rows[i].split[f]);
        }
    }
    printf("\n");
    json_error_t jerr;
    json_t *peer = peer_path ? json_load_file(peer_path, 0, &jerr) : NULL;
    if (peer_path && !peer) fprintf(stderr, "sluice-bench decode: %s: %s (no peer times)\n", peer_path, jerr.text);
    if (att_layer >= 0) {
        printf("attention path of one CSA layer alone (layer %d: indexer scores + top-%d, window + selected entries):\n"
               "%6s %7s %9s %10s %8s %9s %8s\n", att_layer, cfg->index_topk, "batch", "context", "ms", "bytes MB",
               "% ceil", "peer ms", "x peer");
        for (int i = 0; i < nr; i++) {
            if (rows[i].att_ms < 0) continue;
            const double pm = peer_attention_ms(peer, rows[i].batch, rows[i].ctx);
            printf("%6d %7ld %9.4f %10.1f %8.1f", rows[i].batch, rows[i].ctx, rows[i].att_ms, rows[i].att_bytes / 1e6,
                   100.0 * rows[i].att_bytes / (ceiling * 1e12) * 1e3 / rows[i].att_ms);
            if (pm > 0) printf(" %9.4f %8.1f\n", pm, pm / rows[i].att_ms);
            else printf(" %9s %8s\n", "-", "-");
        }
    }

    if (out_path) {
        json_t *o = json_object(), *ra = json_array(), *aa = json_array();
        json_object_set_new(o, "gpu", json_string(prop.name));
        json_object_set_new(o, "commit", json_string(commit));
        json_object_set_new(o, "command", json_string(cmd));
        json_object_set_new(o, "read_ceiling_tb_per_s", json_real(ceiling));
        json_object_set_new(o, "devices", json_integer(n_gpus));
        json_object_set_new(o, "ranks", json_integer(n_dev));
        json_t *m = json_object();
        json_object_set_new(m, "layers", json_integer(cfg->n_layers));
        json_object_set_new(m, "experts", json_string(w.expert_format == QT_NVFP4 ? "nvfp4" : "mxfp4"));
        json_object_set_new(m, "kv_dtype", json_string(copts.kv_fp8 ? "fp8" : "bf16"));
        json_object_set_new(m, "index_key_dtype", json_string(copts.index_fp8 ? "fp8" : "bf16"));
        json_object_set_new(m, "routing", json_string(strstr(cfg->model_id, "-gate") ? "gate" : "uniform"));
        json_object_set_new(o, "model", m);
        json_object_set_new(o, "state", json_string("batch 1: prefilled (C random tokens through the forward); larger "
                                                    "batches: written directly (sl_backend_cuda_fill_state)"));
        for (int i = 0; i < nr; i++) {
            json_t *r = json_object();
            const double floor_ms = rows[i].bytes / (ceiling * 1e12) * 1e3;
            json_object_set_new(r, "batch", json_integer(rows[i].batch));
            json_object_set_new(r, "context", json_integer(rows[i].ctx));
            json_object_set_new(r, "state", json_string(rows[i].prefill_ms >= 0 ? "prefill" : "written"));
            if (rows[i].prefill_ms >= 0) json_object_set_new(r, "prefill_ms", json_real(rows[i].prefill_ms));
            json_object_set_new(r, "experts_touched", json_real(rows[i].touched));
            if (rows[i].read >= 0) {
                json_t *h = json_array();
                for (int k = 0; k <= (rows[i].max_load < MAX_LOAD ? rows[i].max_load : MAX_LOAD); k++)
                    json_array_append_new(h, json_integer(rows[i].by_load[k]));
                json_object_set_new(r, "experts_read", json_integer(rows[i].read));
                json_object_set_new(r, "experts_by_load", h);
            }
            json_object_set_new(r, "ms", json_real(rows[i].ms));
            json_object_set_new(r, "bytes", json_real(rows[i].bytes));
            json_object_set_new(r, "pct_of_ceiling", json_real(100.0 * floor_ms / rows[i].ms));
            json_object_set_new(r, "tokens_per_s", json_real(rows[i].batch / (rows[i].ms * 1e-3)));
            json_object_set_new(r, "ms_per_layer", json_real(rows[i].ms / cfg->n_layers));
            if (n_dev > 1) json_object_set_new(r, "collective_ms", json_real(rows[i].split[SL_FAM_COLLECTIVE]));
            json_object_set_new(r, "peer_ms_per_layer", peer_ms_per_layer(peer, rows[i].batch, rows[i].ctx));
            json_array_append_new(ra, r);
        }
        json_object_set_new(o, "rows", ra);
        for (int i = 0; i < nr; i++) {
            if (rows[i].att_ms < 0) continue;
            const double pm = peer_attention_ms(peer, rows[i].batch, rows[i].ctx);
            json_t *r = json_object();
            json_object_set_new(r, "batch", json_integer(rows[i].batch));
            json_object_set_new(r, "context", json_integer(rows[i].ctx));
            json_object_set_new(r, "layer", json_integer(att_layer));
            json_object_set_new(r, "ms", json_real(rows[i].att_ms));
            json_object_set_new(r, "bytes", json_real(rows[i].att_bytes));
            json_object_set_new(r, "pct_of_ceiling",
                                json_real(100.0 * rows[i].att_bytes / (ceiling * 1e12) * 1e3 / rows[i].att_ms));
            json_object_set_new(r, "peer_ms", pm > 0 ? json_real(pm) : json_null());
            json_array_append_new(aa, r);
        }
        json_object_set_new(o, "attention", aa);
        json_t *fit = json_object();
        json_object_set_new(fit, "fixed_ms", json_real(icpt));
        json_object_set_new(fit, "per_request_ms", json_real(slope));
        json_object_set_new(o, "fit", fit);
        json_t *split = json_object();
        for (int f = 0; f <= SL_FAM_N; f++) {
            json_t *fo = json_object();
            for (int i = 0; i < nr; i++) {
                if (rows[i].ctx != ctxs[0]) continue;
                char key[16];
                snprintf(key, sizeof key, "%d", rows[i].batch);
                json_object_set_new(fo, key, json_real(rows[i].split[f]));
            }
            json_object_set_new(split, f < SL_FAM_N ? sl_cuda_family_names[f] : "other", fo);
        }
        json_object_set_new(o, "split", split);
        json_object_set_new(o, "split_context", json_integer(ctxs[0]));
        if (peer) {
            json_t *pm = json_object();
            const char *keys[] = {"gpu", "torch", "transformers", "layers", "command"};
            for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
                if (json_object_get(peer, keys[k])) json_object_set(pm, keys[k], json_object_get(peer, keys[k]));
            json_object_set_new(o, "peer", pm);
        }
        if (json_dump_file(o, out_path, JSON_INDENT(1) | JSON_REAL_PRECISION(6)))
            fprintf(stderr, "sluice-bench decode: cannot write %s\n", out_path);
        json_decref(o);
    }
    json_decref(peer);
    be->ops->destroy(be);
    v4_pool_free(&pool);
    v4_weights_free(&w);
    return 0;
}

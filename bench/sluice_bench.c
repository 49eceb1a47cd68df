/* sluice_bench.c — kernel benchmarks. `sluice-bench moe`: one V4-Flash MoE layer (256 NVFP4 experts,
 * hidden 4096, inter 2048, top-6 + 1 FP8 shared expert) on the GPU, per batch and routing:
 * median time of CUDA-graph replays that rotate among input sets and weight sets (so L2 does not
 * hold the weights), the bytes that must be read, TB/s, and % of the HBM read ceiling measured in
 * the same run (an 8 GiB read). The PyTorch peer's times come from bench/moe_peer.py (--peer FILE).
 * Writes one JSON object (--out FILE) and prints a table.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef SLUICE_HAVE_CUDA
int main(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "sluice-bench: built without CUDA (SLUICE_CUDA=OFF or no nvcc): nothing to measure\n");
    return 77;
}
#else
#include <dlfcn.h>
#include <cuda_runtime_api.h>
#include "moe_cuda.h"
#include "moe_kernels.h"
#include "moe_bench_kernels.h"

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "sluice-bench: %s: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)

enum { NSETS = 8, NLAYERS = 4, MAXB = 512 };

static int cmp_f(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }
static float median(float *v, int n) { qsort(v, n, sizeof *v, cmp_f); return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]); }

/* v25: every row is also timed with each replay queued behind a 50 us hold kernel (ms_queued), so its start
 * event fires only when the GPU is ready to run it: the pair then holds no host submission gap. The first
 * run (bench/NOTES.md v25 (1)) read the two within -2.2..+1.2 % (no gap at batches 1-8, where a host gap would
 * weigh most), so ms stays the unqueued reading every run before v25 made and ms_queued goes beside it. */
#define HOLD_NS 50000ull

/* v25: the SM clock (MHz) the work queued on st before it left: moe_sm_mhz over 50 us, into d (one float). v40: st is
 * non-blocking, so the legacy-stream cudaMemcpy did not wait for the probe and every reading was the one before it
 * (the JSON's sm_mhz from v25 to v39: the previous row's, or the process's warm-up for the first); now it waits. */
static float sm_mhz_now(float *d, cudaStream_t st)
{
    float mhz;
    CU(moe_sm_mhz(50000ull, d, st));
    CU(cudaStreamSynchronize(st));
    CU(cudaMemcpy(&mhz, d, sizeof mhz, cudaMemcpyDeviceToHost));
    return mhz;
}
/* v40: the SM clock while graph g replays (ms long) on st: moe_sm_mhz over 80 % of ms on the side stream, launched
 * first so it starts as the replay does (one thread: one SM slot of the replay's grids) */
static float sm_mhz_during(cudaGraphExec_t g, double ms, float *d, cudaStream_t st, cudaStream_t side)
{
    float mhz;
    CU(moe_sm_mhz((unsigned long long)(ms * 0.8e6), d, side));
    CU(cudaGraphLaunch(g, st));
    CU(cudaStreamSynchronize(st));
    CU(cudaStreamSynchronize(side));
    CU(cudaMemcpy(&mhz, d, sizeof mhz, cudaMemcpyDeviceToHost));
    return mhz;
}
/* HBM read ceiling in 10^12 bytes/s: n bytes at p read by moe_hbm_read, one warm-up, median of 7. */
static double read_ceiling(const void *p, size_t n, unsigned *sink, cudaEvent_t e0, cudaEvent_t e1)
{
    float tv[7];
    CU(moe_hbm_read(p, n, sink, 0));
    for (int i = 0; i < 7; i++) {
        CU(cudaEventRecord(e0, 0)); CU(moe_hbm_read(p, n, sink, 0)); CU(cudaEventRecord(e1, 0));
        CU(cudaEventSynchronize(e1)); CU(cudaEventElapsedTime(&tv[i], e0, e1));
    }
    return n / (median(tv, 7) * 1e-3) / 1e12;
}

/* The peer file (bench/moe_peer.py) holds lines "batch routing ms [ms_queued]" (the fourth from v25). */
typedef struct { int batch; char routing[16]; double ms, ms_q; } peer_row;
static peer_row g_peer[64];
static int g_npeer;

static void load_peer(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "sluice-bench: cannot read peer file %s (peer_ms = null)\n", path); return; }
    char line[256];
    while (g_npeer < 64 && fgets(line, sizeof line, f)) {
        peer_row *r = &g_peer[g_npeer];
        r->ms_q = -1;
        if (line[0] != '#' && sscanf(line, "%d %15s %lf %lf", &r->batch, r->routing, &r->ms, &r->ms_q) >= 3) g_npeer++;
    }
    fclose(f);
}

static double peer_ms(int batch, const char *routing, int queued)
{
    for (int i = 0; i < g_npeer; i++)
        if (g_peer[i].batch == batch && !strcmp(g_peer[i].routing, routing)) return queued ? g_peer[i].ms_q : g_peer[i].ms;
    return -1;
}

static void make_layer(moe_cuda_layer *L, const moe_cuda_shape *s, uint32_t seed, float *gate, float *bias)
{
    if (moe_cuda_layer_init(L, s)) exit(1);
    const int H = s->hidden, I = s->inter, E = s->n_experts;
    uint8_t *q[3], *sc[3];
    for (int m = 0; m < 3; m++) {
        const size_t n = (size_t)I * H;
        CU(cudaMalloc((void **)&q[m], n / 2));
        CU(cudaMalloc((void **)&sc[m], n / 16));
    }
    const float s2[3] = {1e-4f, 1e-4f, 1e-4f};
    for (int e = 0; e < E; e++) {
        for (int m = 0; m < 3; m++) {
            const size_t n = (size_t)I * H;
            CU(moe_fill_bytes(q[m], n / 2, seed * 7919u + (uint32_t)(e * 3 + m), 0, 0, 0, 0));
            CU(moe_fill_bytes(sc[m], n / 16, seed * 104729u + (uint32_t)(e * 3 + m), 1, 0x20, 0x40, 0));
        }
        if (moe_cuda_set_expert_dev(L, e, (const uint8_t *const *)q, (const uint8_t *const *)sc, s2)) exit(1);
    }
    const float *sh_s[3];
    float *ss = malloc((size_t)(I / 128) * (H / 128) * sizeof(float));
    /* v25: 2^-10 (was 1e-3): a power of two, as DeepSeek's ue8m0 block scales are (moe_cuda_layer.sh_pow2) */
    for (int i = 0; i < (I / 128) * (H / 128); i++) ss[i] = 0x1p-10f;
    for (int m = 0; m < 3; m++) sh_s[m] = ss;
    uint8_t *f8[3];
    for (int m = 0; m < 3; m++) {
        CU(cudaMalloc((void **)&f8[m], (size_t)I * H));
        CU(moe_fill_bytes(f8[m], (size_t)I * H, seed * 41u + 3000u + (uint32_t)m, 1, 0x08, 0x70, 0));
    }
    if (s->has_shared && moe_cuda_set_shared_dev(L, (const uint8_t *const *)f8, sh_s)) exit(1);
    for (int m = 0; m < 3; m++) { cudaFree(q[m]); cudaFree(sc[m]); cudaFree(f8[m]); }
    free(ss);
    if (moe_cuda_set_router(L, gate, bias, NULL)) exit(1);
}

/* Timeline of the one-launch layer (moe_fused.cu) at batches 1, 4, 8, random routing: per item kind, when
 * the first started and the last ended (us from the kernel's first item start), items and median length;
 * plus when the lists flag rose. Median over 8 forwards (after a warm-up), outside a graph. */
static void fused_timeline(moe_cuda_layer *L, moe_cuda_ws *W, uint16_t *const *x, int32_t *tok, float *out,
                           cudaStream_t st, const float *gate, const float *bias)
{
    static const char *kn[5] = {"logits", "shared g/u", "shared down", "routed g/u", "routed down"};
    const int G = W->grid_fused, nw = G * 8 * 2 + 5, fm = W->fused_max_t;
    unsigned long long *d, *hbuf = malloc((size_t)nw * 8);
    if (!hbuf || cudaMalloc((void **)&d, (size_t)nw * 8) != cudaSuccess) { fprintf(stderr, "trace: no memory\n"); return; }
    W->fused_max_t = MOE_FUSED_MAX_T;
    for (int l = 0; l < NLAYERS; l++)
        if (moe_cuda_set_router(&L[l], gate, bias, NULL)) return;
    const int tb[3] = {1, 4, 8};
    for (int bi = 0; bi < 3; bi++) {
        double first[5][8], last[5][8], med[5][8], flag[8], topk[8], total[8], lph[3][8];
        int cnt[5] = {0};
        for (int rep = 0; rep < 9; rep++) {
            CU(cudaMemset(d, 0, (size_t)nw * 8));
            W->fused_trace = d;
            if (moe_cuda_forward(&L[rep % NLAYERS], W, x[rep % NSETS], tok, tb[bi], out, st)) break;
            W->fused_trace = NULL;
            CU(cudaStreamSynchronize(st));
            CU(cudaMemcpy(hbuf, d, (size_t)nw * 8, cudaMemcpyDeviceToHost));
            if (rep == 0) continue;   /* warm-up */
            unsigned long long t0 = ~0ull, tend = 0;
            for (int i = 0; i < G * 8; i++)
                if (hbuf[2 * i]) { if (hbuf[2 * i] < t0) t0 = hbuf[2 * i]; }
            double f[5], la[5], lens[5][4096];
            int n[5] = {0};
            for (int k = 0; k < 5; k++) f[k] = 1e30, la[k] = 0;
            for (int i = 0; i < G * 8; i++) {
                if (!hbuf[2 * i]) continue;
                const int k = (int)(hbuf[2 * i + 1] >> 32);
                const unsigned long long e = hbuf[2 * i] + (hbuf[2 * i + 1] & 0xFFFFFFFFull);
                const double a = (hbuf[2 * i] - t0) / 1e3, b = (e - t0) / 1e3;
                if (k < 0 || k > 4) continue;
                if (a < f[k]) f[k] = a;
                if (b > la[k]) la[k] = b;
                if (n[k] < 4096) lens[k][n[k]++] = b - a;
                if (e > tend) tend = e;
            }
            for (int k = 0; k < 5; k++) {
                first[k][rep - 1] = n[k] ? f[k] : 0;
                last[k][rep - 1] = la[k];
                float tmp[4096];
                for (int j = 0; j < n[k]; j++) tmp[j] = (float)lens[k][j];
                med[k][rep - 1] = n[k] ? median(tmp, n[k]) : 0;
                cnt[k] = n[k];
            }
            flag[rep - 1] = hbuf[nw - 5] ? ((double)hbuf[nw - 5] - (double)t0) / 1e3 : 0;
            topk[rep - 1] = hbuf[nw - 4] ? ((double)hbuf[nw - 4] - (double)t0) / 1e3 : 0;
            for (int k = 0; k < 3; k++) lph[k][rep - 1] = hbuf[nw - 3 + k] ? ((double)hbuf[nw - 3 + k] - (double)t0) / 1e3 : 0;
            total[rep - 1] = (tend - t0) / 1e3;
        }
        float tmp[8];
        printf("fused timeline, batch %d (us from the first item start; median of 8 forwards, outside a graph):\n", tb[bi]);
        for (int j = 0; j < 8; j++) tmp[j] = (float)flag[j];
        printf("  block 0 routing from %.1f", median(tmp, 8));
        for (int j = 0; j < 8; j++) tmp[j] = (float)topk[j];
        printf(" to %.1f; logits item of ticket 0:", median(tmp, 8));
        for (int k = 0; k < 3; k++) {
            for (int j = 0; j < 8; j++) tmp[j] = (float)lph[k][j];
            printf(" %s %.1f", k == 0 ? "x staged" : k == 1 ? "computed" : "counted", median(tmp, 8));
        }
        printf("\n");
        for (int j = 0; j < 8; j++) tmp[j] = (float)total[j];
        printf("  last item ends at %.1f\n", median(tmp, 8));
        for (int k = 0; k < 5; k++) {
            float a[8], b[8], c[8];
            for (int j = 0; j < 8; j++) a[j] = (float)first[k][j], b[j] = (float)last[k][j], c[j] = (float)med[k][j];
            printf("  %-12s items %5d  first start %7.1f  last end %7.1f  median item %6.1f\n", kn[k], cnt[k],
                   median(a, 8), median(b, 8), median(c, 8));
        }
    }
    W->fused_max_t = fm;
    cudaFree(d);
    free(hbuf);
}

#define NTUNE 49   /* fields of one --variants entry */
#define VARIANTS_USAGE "E,R,L,K[,KT,F,TC,OV,SH,FK,DY,DM,NO,PF,PM,PD,FU,FM,TL,SP,FS,KG,KX,KH,SR,ES,T1,TT,TN,TX,TM,TG,TA,SX,SW,SF,SN,X4,XT,XE,TB,LR,LG,FN,FX,CE,HT,SG,GW][/...]"
/* The moe_cuda_ws field of each --variants field, in VARIANTS_USAGE's order; F (5) is fused_max_t + 100 fused_opt */
#define TF(f) offsetof(moe_cuda_ws, f)
static const size_t tune_field[NTUNE] = {
    TF(early_pdl), TF(down_rm_min_t), TF(logits16_min_t), TF(logits_ks), TF(logits_ks_max_t), TF(fused_max_t),
    TF(logits_tc_min_t), TF(nt2_overlap), TF(shared_min_t), TF(shared_fork), TF(dyn_items), TF(dyn_max_t),
    TF(nt2_first), TF(pf), TF(pf_max_t), TF(pf_dn_mb), TF(fuse1), TF(fuse1_min_t), TF(topk_lists_max_t),
    TF(side_prio), TF(fuse_small), TF(fs_ks_gu), TF(fs_ks_max_t), TF(fs_ks_sh), TF(fs_rm), TF(fs_early_sh_max_t),
    TF(tok1_max), TF(tok1_max_t), TF(tok1_min_t), TF(topk_excl_max_t), TF(topk_excl_min_t), TF(topk_group_max_t),
    TF(nt2_all_min_t), TF(shared_xl_min_t), TF(shared_wg_min_t), TF(shared_wg_fold), TF(shared_wg_n128_min_t),
    TF(x4_min_t), TF(x4_tok), TF(x4_early), TF(topk_blocks_max_t), TF(lists_runs_max_t), TF(logits_tc_shape),
    TF(fs_b5_min_t), TF(fs_b5_max_t), TF(fs_cmb_early_max_t), TF(shared_tile_max_t),
    TF(shared_gemm_min_t), TF(shared_gemm_wg)
};
#undef TF
static int tune_get(const moe_cuda_ws *W, int n)
{
    const int v = *(const int *)((const char *)W + tune_field[n]);
    return n == 5 ? v + 100 * W->fused_opt : v;
}
static void tune_set(moe_cuda_ws *W, int n, int v)
{
    if (n == 5) W->fused_opt = v / 100, v %= 100;
    *(int *)((char *)W + tune_field[n]) = v;
}
/* The defaults of the --variants fields (moe_cuda_ws_defaults'), which fill a short entry */
static int variant_dflt[NTUNE];
static void variant_defaults(void)
{
    moe_cuda_ws D;
    memset(&D, 0, sizeof D);
    moe_cuda_ws_defaults(&D);
    for (int n = 0; n < NTUNE; n++) variant_dflt[n] = tune_get(&D, n);
}

/* --default-variant: the default entry as NAME=VALUE pairs named as in VARIANTS_USAGE (bench/runs/lib.sh's `variant`
 * edits it); 1 if VARIANTS_USAGE does not name NTUNE fields */
static int print_default_variant(void)
{
    const char *u = VARIANTS_USAGE;
    for (int n = 0; n < NTUNE; n++) {
        while (*u == ',' || *u == '[') u++;
        const char *e = u;
        while (*e && *e != ',' && *e != '[' && *e != ']') e++;
        if (e == u) { fprintf(stderr, "sluice-bench: VARIANTS_USAGE names %d of %d fields\n", n, NTUNE); return 1; }
        printf("%s%.*s=%d", n ? " " : "", (int)(e - u), u, variant_dflt[n]);
        u = e;
    }
    printf("\n");
    return 0;
}

/* --stages: one replay of each input set's graph with the stage trace on (moe_trace_set); per stage the
 * median over the sets of its first block start and last warp end, in us from the replay's first start */
static void stage_trace(cudaGraphExec_t *g, const moe_cuda_layer *L, moe_cuda_ws *W, uint16_t *const *x, int32_t *tok,
                        float *out, cudaStream_t st, int T, const char *routing);
static void stage_timeline(cudaGraphExec_t *g, cudaStream_t st, int T, const char *routing)
{
    stage_trace(g, NULL, NULL, NULL, NULL, NULL, st, T, routing);
}
/* v21: the same trace of the forward issued on the stream (no graph) */
static void stream_timeline(const moe_cuda_layer *L, moe_cuda_ws *W, uint16_t *const *x, int32_t *tok, float *out,
                            cudaStream_t st, int T, const char *routing)
{
    stage_trace(NULL, L, W, x, tok, out, st, T, routing);
}
/* v32 --item-log (builds with -DMOE_TRACE_ITEMS=1): the first input set's replay also logs every warp-item of the
 * T <= 8 kernel (moe_ilog_set); item_log_print: per item kind the count, duration quantiles and span, then per 5 us
 * of the replay the warps busy with each kind and the bytes the items running then read (each item's bytes spread
 * evenly over its span), as TB/s. t0: the stage trace's first start. */
static int g_item_log;
#define ILOG_CAP (1u << 20)
static int cmp_u32(const void *a, const void *b)
{
    const unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}
static void item_log_print(const unsigned long long *r, unsigned long long n, unsigned long long t0, int T,
                           const char *routing)
{
    enum { NB = 400 };
    const double bw = 5.0;   /* bin width, us */
    static const int kind[] = {MOE_TR_SH_GU, MOE_TR_GU1, MOE_TR_SH_DN, MOE_TR_DN1};
    static const char *kn[] = {"sh-gu", "gu1", "sh-dn", "dn1"};
    static double busy[4][NB], bytes[NB];
    static unsigned dur[ILOG_CAP];
    memset(busy, 0, sizeof busy);
    memset(bytes, 0, sizeof bytes);
    if (n > ILOG_CAP) n = ILOG_CAP;
    int last = 0;
    printf("  items %d %s: %llu records\n", T, routing, n);
    for (int k = 0; k < 4; k++) {
        unsigned m = 0;
        double b0 = 1e30, e1 = 0, mb = 0;
        for (unsigned long long i = 0; i < n; i++) {
            if ((int)((r[2 * i + 1] >> 32) & 0xff) != kind[k]) continue;
            const double s = ((double)r[2 * i] - (double)t0) / 1e3, d = (double)(r[2 * i + 1] & 0xffffffffu) / 1e3;
            const double by = (double)((r[2 * i + 1] >> 40) & 0xffff) * 16;
            dur[m++] = (unsigned)(r[2 * i + 1] & 0xffffffffu);
            if (s < b0) b0 = s;
            if (s + d > e1) e1 = s + d;
            mb += by / 1e6;
            for (int b = s < 0 ? 0 : (int)(s / bw); b < NB && b * bw < s + d; b++) {
                const double lo = b * bw > s ? b * bw : s, hi = (b + 1) * bw < s + d ? (b + 1) * bw : s + d;
                if (hi <= lo) continue;
                busy[k][b] += (hi - lo) / bw;
                bytes[b] += d > 0 ? by * (hi - lo) / d : 0;
                if (b > last) last = b;
            }
        }
        if (!m) continue;
        qsort(dur, m, sizeof *dur, cmp_u32);
        printf("  items %d %s %s: %u, %.1f MB, us p10 %.1f p50 %.1f p90 %.1f max %.1f, span %.1f-%.1f\n", T, routing,
               kn[k], m, mb, dur[m / 10] / 1e3, dur[m / 2] / 1e3, dur[m * 9 / 10] / 1e3, dur[m - 1] / 1e3, b0, e1);
    }
    printf("  items %d %s per %.0f us (from us: warps busy sh-gu/gu1/sh-dn/dn1, TB/s):", T, routing, bw);
    for (int b = 0; b <= last && b < NB; b++)
        printf(" %.0f: %.0f/%.0f/%.0f/%.0f %.2f;", b * bw, busy[0][b], busy[1][b], busy[2][b], busy[3][b],
               bytes[b] / (bw * 1e-6) / 1e12);
    printf("\n");
}

static void stage_trace(cudaGraphExec_t *g, const moe_cuda_layer *L, moe_cuda_ws *W, uint16_t *const *x, int32_t *tok,
                        float *out, cudaStream_t st, int T, const char *routing)
{
    static const char *nm[MOE_TR_SLOTS] = {"logits", "topk", "lists", "topk+lists", "gu1", "gu2", "fused1", "dn1",
                                           "dn2", "sh-gu", "sh-dn", "combine", "ticket", "topk-ld", "guw", "dnw"};
    unsigned long long *d, h[2 * MOE_TR_SLOTS];
    float b[MOE_TR_SLOTS][NSETS], e[MOE_TR_SLOTS][NSETS];
    int seen[MOE_TR_SLOTS] = {0};
    float evms[NSETS], span[NSETS];   /* v40: each traced replay between events (ms) and its kernels' span (us) */
    cudaEvent_t ev[2];
    CU(cudaEventCreate(&ev[0])); CU(cudaEventCreate(&ev[1]));
    CU(cudaMalloc((void **)&d, sizeof h));
    for (int i = 0; i < NSETS; i++) {
        for (int k = 0; k < MOE_TR_SLOTS; k++) h[2 * k] = ~0ull, h[2 * k + 1] = 0;
        CU(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
        CU(moe_trace_set(d));
        unsigned long long *lg = NULL, lh[2] = {0, ILOG_CAP};
        if (g_item_log && i == 0) {
            CU(cudaMalloc((void **)&lg, (2 + 2 * (size_t)ILOG_CAP) * 8));
            CU(cudaMemcpy(lg, lh, sizeof lh, cudaMemcpyHostToDevice));
            CU(moe_ilog_set(lg));
        }
        CU(cudaEventRecord(ev[0], st));
        if (g) CU(cudaGraphLaunch(g[i], st));
        else if (moe_cuda_forward(&L[i % NLAYERS], W, x[i], tok, T, out, st)) exit(1);
        CU(cudaEventRecord(ev[1], st));
        CU(cudaStreamSynchronize(st));
        CU(cudaEventElapsedTime(&evms[i], ev[0], ev[1]));
        CU(moe_trace_set(NULL));
        CU(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        unsigned long long t0 = ~0ull, t1 = 0;   /* the first start and the last end of the replay's stages */
        for (int k = 0; k < MOE_TR_SLOTS; k++) {
            if (h[2 * k + 1] && h[2 * k] < t0) t0 = h[2 * k];
            if (h[2 * k + 1] > t1) t1 = h[2 * k + 1];
        }
        span[i] = t1 > t0 ? (float)(t1 - t0) / 1e3f : 0.f;
        if (lg) {
            CU(moe_ilog_set(NULL));
            CU(cudaMemcpy(lh, lg, sizeof lh, cudaMemcpyDeviceToHost));
            const unsigned long long n = lh[0] < ILOG_CAP ? lh[0] : ILOG_CAP;
            unsigned long long *rec = malloc((2 * n + 1) * 8);
            if (!rec) { fprintf(stderr, "item log: no memory\n"); exit(1); }
            CU(cudaMemcpy(rec, lg + 2, 2 * n * 8, cudaMemcpyDeviceToHost));
            item_log_print(rec, n, t0, T, routing);
            free(rec);
            CU(cudaFree(lg));
        }
        for (int k = 0; k < MOE_TR_SLOTS; k++) {
            seen[k] = h[2 * k + 1] != 0;
            b[k][i] = seen[k] ? (float)(h[2 * k] - t0) / 1e3f : 0.f;
            e[k][i] = seen[k] ? (float)(h[2 * k + 1] - t0) / 1e3f : 0.f;
        }
    }
    printf("  stages%s %d %s (us):", g ? "" : "-stream", T, routing);
    for (int k = 0; k < MOE_TR_SLOTS; k++)
        if (seen[k]) printf(" %s %.1f-%.1f", nm[k], median(b[k], NSETS), median(e[k], NSETS));
    printf("\n");
    printf("  stage gaps%s %d %s (per set, us: the replay between events less its kernels' first start to last end):",
           g ? "" : "-stream", T, routing);
    for (int i = 0; i < NSETS; i++) printf(" %.1f", evms[i] * 1e3f - span[i]);
    printf("\n");
    CU(cudaEventDestroy(ev[0])); CU(cudaEventDestroy(ev[1]));
    CU(cudaFree(d));
}

/* The graph of input set i (weight set i % NLAYERS of L) into *g, replayed once (the main loop reads the
 * routing it left in W->idx). */
static void capture_graph(cudaGraphExec_t *g, const moe_cuda_layer *L, moe_cuda_ws *W, uint16_t *const *x,
                          int32_t *tok, int T, float *out, cudaStream_t st, int i)
{
    cudaGraph_t gr;
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    if (moe_cuda_forward(&L[i % NLAYERS], W, x[i], tok, T, out, st)) exit(1);
    CU(cudaStreamEndCapture(st, &gr));
    CU(cudaGraphInstantiateWithFlags(g, gr, cudaGraphInstantiateFlagUseNodePriority));
    CU(cudaGraphDestroy(gr));
    CU(cudaGraphLaunch(*g, st)); CU(cudaStreamSynchronize(st));
}

static double g_launch_us;   /* the last replay_ms's median host time inside cudaGraphLaunch (us, v25) */
static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* ---- v41 (--power MS): energy per replay under sustained load. NVML (libnvidia-ml, which ships with the driver) is
 * opened at run time, so the bench links nothing new; its board energy counter (mJ) is read around MS milliseconds of
 * back-to-back replays, its SM clock every >= 20 ms during them. */
typedef struct {
    void *dev;
    int (*energy)(void *, unsigned long long *);   /* nvmlDeviceGetTotalEnergyConsumption */
    int (*clock)(void *, int, unsigned *);         /* nvmlDeviceGetClockInfo */
} nvml_t;

static int nvml_load(nvml_t *n)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) return -1;
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*by_bus)(const char *, void **) = (int (*)(const char *, void **))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    n->energy = (int (*)(void *, unsigned long long *))dlsym(h, "nvmlDeviceGetTotalEnergyConsumption");
    n->clock = (int (*)(void *, int, unsigned *))dlsym(h, "nvmlDeviceGetClockInfo");
    char bus[32];
    if (!init || !by_bus || !n->energy || !n->clock || init() || cudaDeviceGetPCIBusId(bus, sizeof bus, 0) != cudaSuccess ||
        by_bus(bus, &n->dev))
        return -1;
    unsigned long long e;
    return n->energy(n->dev, &e) ? -1 : 0;   /* NVML_SUCCESS is 0 */
}
/* --power's NVML, or one line on stderr and -1 */
static int nvml_open(nvml_t *n)
{
    if (!nvml_load(n)) return 0;
    fprintf(stderr, "sluice-bench: --power needs NVML (libnvidia-ml.so.1 with an energy counter)\n");
    return -1;
}

/* Where repeat r of a one-shot read of bytes starts in an nbuf-byte buffer (plus extra), 4 KiB aligned: the places
 * move by ~1 GB per repeat, so L2 holds none of the last one's bytes. */
static size_t region_off(int r, size_t extra, size_t nbuf, size_t bytes)
{
    return ((size_t)r * 997 * 1000 * 1000 + extra) % (nbuf - bytes) & ~(size_t)4095;
}

/* One launch of the work whose energy power_run measures: replay i of the row's graphs, one 8 GiB read, or (sw > 0,
 * v42: sluice-bench stream --power) one moe_stream_read of sw warps x sn chunks, depth sd, mode sm, from a place in the
 * n-byte buffer big that moves with i (so L2 holds none of it). */
typedef struct { cudaGraphExec_t *g; const void *big; size_t n; unsigned *sink; int sw, sn, sd, sm; } power_work;
static void power_launch(const power_work *w, int i, cudaStream_t st)
{
    if (w->g) CU(cudaGraphLaunch(w->g[i % NSETS], st));
    else if (w->sw) {
        const size_t stride = (size_t)w->sn * 1152, bytes = stride * w->sw;
        const size_t off = region_off(i, 0, w->n, bytes);
        CU(moe_stream_read((const uint8_t *)w->big + off, w->sw, stride, w->sn, w->sd, w->sm, w->sink, st));
    } else CU(moe_hbm_read(w->big, w->n, w->sink, st));
}

typedef struct { int n; double s, ms_per, watts, j_per, nvml_mhz, probe_mhz, w0, w1; } power_row;   /* w0, w1: the
                                                                   window in CLOCK_REALTIME s (nvidia-smi's timestamps) */
static double now_realtime(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
/* w launched back to back on st for ms milliseconds, k launches per group, one group queued ahead of the one the host
 * waits on (so the GPU never idles between them); the one-thread clock probe (moe_sm_mhz) on side over 60 % of it.
 * k 0: nothing launched, the GPU idle for ms (the board's idle power). */
static power_row power_run(const nvml_t *nv, const power_work *w, int k, double ms, cudaStream_t st, cudaStream_t side,
                           float *mhz_d)
{
    power_row r = {0};
    cudaEvent_t ea, eb, eg[2];
    CU(cudaEventCreate(&ea)); CU(cudaEventCreate(&eb)); CU(cudaEventCreate(&eg[0])); CU(cudaEventCreate(&eg[1]));
    unsigned long long j0 = 0, j1 = 0;
    double mhz_sum = 0, t_smp = 0;
    int smp = 0;
    CU(cudaDeviceSynchronize());
    nv->energy(nv->dev, &j0);
    const double t0 = now_us() * 1e-6;
    r.w0 = now_realtime();
    CU(cudaEventRecord(ea, st));
    for (int grp = 0; k > 0; grp++) {
        for (int i = 0; i < k; i++) power_launch(w, r.n++, st);
        CU(cudaEventRecord(eg[grp & 1], st));
        if (grp == 0) CU(moe_sm_mhz((unsigned long long)(ms * 0.6e6), mhz_d, side));
        if (grp > 0) CU(cudaEventSynchronize(eg[(grp - 1) & 1]));
        const double t = now_us() * 1e-6;
        unsigned c;
        if (t - t_smp >= 0.02 && !nv->clock(nv->dev, 1, &c)) mhz_sum += c, smp++, t_smp = t;   /* NVML_CLOCK_SM */
        if ((t - t0) * 1e3 >= ms) break;
    }
    if (k == 0) {
        const struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000 * (long)(ms / 1000)) * 1e6)};
        nanosleep(&ts, NULL);
    }
    CU(cudaEventRecord(eb, st));
    CU(cudaEventSynchronize(eb));
    CU(cudaStreamSynchronize(side));
    nv->energy(nv->dev, &j1);
    r.s = now_us() * 1e-6 - t0;
    r.w1 = now_realtime();
    float gms = 0;
    CU(cudaEventElapsedTime(&gms, ea, eb));
    float pm = 0;
    CU(cudaMemcpy(&pm, mhz_d, sizeof pm, cudaMemcpyDeviceToHost));
    r.probe_mhz = k ? pm : 0;
    r.ms_per = r.n ? gms / r.n : 0;
    r.watts = (j1 - j0) * 1e-3 / r.s;
    r.j_per = r.n ? (j1 - j0) * 1e-3 / r.n : 0;
    r.nvml_mhz = smp ? mhz_sum / smp : 0;
    CU(cudaEventDestroy(ea)); CU(cudaEventDestroy(eb)); CU(cudaEventDestroy(eg[0])); CU(cudaEventDestroy(eg[1]));
    return r;
}
/* One power_run of launches that read bytes each: rate, power, energy per byte and the clocks. */
static void power_print(const char *what, const power_row *r, size_t bytes)
{
    printf("  power %s: %d launches of %.1f MB in %.2f s, %.3f TB/s, %.0f W, %.1f pJ per byte; SM %.0f MHz (NVML), %.0f "
           "(probe)\n", what, r->n, bytes / 1e6, r->s, bytes / (r->ms_per * 1e-3) / 1e12, r->watts, r->j_per / bytes * 1e12,
           r->nvml_mhz, r->probe_mhz);
}

/* Median ms of reps x NSETS replays rotating over the sets' graphs, each queued behind the hold if hold;
 * tm: reps * NSETS floats of scratch. g_launch_us: the median over its first 4096 launches. */
static double replay_ms(cudaGraphExec_t *g, cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1, int reps, float *tm,
                        int hold)
{
    float lu[4096];
    const int n = reps * NSETS, nl = n < (int)(sizeof lu / sizeof *lu) ? n : (int)(sizeof lu / sizeof *lu);
    for (int rr = 0; rr < n; rr++) {
        if (hold) CU(moe_hold(HOLD_NS, st));
        CU(cudaEventRecord(e0, st));
        const double t0 = now_us();
        CU(cudaGraphLaunch(g[rr % NSETS], st));
        if (rr < nl) lu[rr] = (float)(now_us() - t0);
        CU(cudaEventRecord(e1, st));
        CU(cudaEventSynchronize(e1)); CU(cudaEventElapsedTime(&tm[rr], e0, e1));
    }
    g_launch_us = median(lu, nl);
    const double med = median(tm, n);   /* sorts tm */
    if (getenv("SLUICE_BENCH_SPREAD"))   /* v40: where a row's readings lie (tm and lu sorted by median) */
        printf("  spread%s (ms p10 p50 p90 max; launch us p50 p90 max): %.4f %.4f %.4f %.4f; %.1f %.1f %.1f\n",
               hold ? " queued" : "", tm[n / 10], tm[n / 2], tm[n * 9 / 10], tm[n - 1], lu[nl / 2], lu[nl * 9 / 10], lu[nl - 1]);
    return med;
}

/* v42: the floor under every row's replay, the graph's own start and end: graphs of n empty kernels (moe_empty),
 * plain or under programmatic dependent launch as the layer's kernels are, replayed as the rows are (unqueued, and
 * queued behind the hold); us, median of 64 x NSETS replays. */
static void graph_floor(cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1, float *tm)
{
    static const int cfg[][2] = {{1, 0}, {4, 0}, {4, 1}, {8, 1}};   /* {kernels, pdl} */
    printf("graph floor (us per replay of empty kernels, unqueued / queued):");
    for (int c = 0; c < (int)(sizeof cfg / sizeof cfg[0]); c++) {
        cudaGraphExec_t g[NSETS];
        for (int i = 0; i < NSETS; i++) {
            cudaGraph_t gr;
            CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            for (int k = 0; k < cfg[c][0]; k++) CU(moe_empty(cfg[c][1], st));
            CU(cudaStreamEndCapture(st, &gr));
            CU(cudaGraphInstantiate(&g[i], gr, 0));
            CU(cudaGraphDestroy(gr));
        }
        const double u = replay_ms(g, st, e0, e1, 64, tm, 0) * 1e3, q = replay_ms(g, st, e0, e1, 64, tm, 1) * 1e3;
        printf(" %d%s %.1f / %.1f;", cfg[c][0], cfg[c][1] ? " PDL" : "", u, q);
        for (int i = 0; i < NSETS; i++) CU(cudaGraphExecDestroy(g[i]));
    }
    printf("\n");
}

/* --placements P (v21): does where the weights land decide the 5 % spread between bench processes (batch 64
 * read 0.768 / 0.783 / 0.810 ms in the three processes of one call, NOTES v19 (8); not the SM clock, v20
 * (4))? Placement 0 is the weight sets already made (L); placements 1..P-1 make the same NLAYERS weight sets
 * again (same seeds, same bytes) after a spacer allocation of a different size, all kept alive. Then, per
 * round, every placement's graphs are measured in turn at each batch (random routing), interleaved as the
 * A/B variants are. A placement effect is the same placement fast or slow in every round; the summary gives
 * per batch each placement's median over the rounds and the spread between placements beside the spread
 * between rounds. */
static int bench_placements(moe_cuda_layer *L, const moe_cuda_shape *s, float *gate, float *bias, moe_cuda_ws *W,
                            uint16_t *const *x, int32_t *tok, float *out, cudaStream_t st, cudaEvent_t e0,
                            cudaEvent_t e1, const int *batches, int nb, int reps, int P)
{
    enum { PMAX = 8, ROUNDS = 3 };
    moe_cuda_layer Lp[PMAX][NLAYERS];
    void *spacer[PMAX] = {0};
    memcpy(Lp[0], L, sizeof Lp[0]);
    for (int p = 1; p < P; p++) {
        const size_t sp = ((size_t)p * 1531 + 2) << 20;   /* MB, not a multiple of any page size above 1 MB */
        CU(cudaMalloc(&spacer[p], sp));
        for (int l = 0; l < NLAYERS; l++) make_layer(&Lp[p][l], s, (uint32_t)l + 1, gate, bias);
    }
    CU(cudaDeviceSynchronize());
    for (int p = 0; p < P; p++) {
        printf("placement %d: w13", p);
        for (int l = 0; l < NLAYERS; l++) printf(" %p", (void *)Lp[p][l].w13);
        printf("\n");
    }
    static double ms[PMAX][16][ROUNDS];
    float *tm = malloc((size_t)reps * NSETS * sizeof(float));
    cudaGraphExec_t g[NSETS];
    for (int r = 0; r < ROUNDS; r++)
        for (int p = 0; p < P; p++) {
            printf("round %d placement %d:", r, p);
            for (int bi = 0; bi < nb; bi++) {
                for (int i = 0; i < NSETS; i++) capture_graph(&g[i], Lp[p], W, x, tok, batches[bi], out, st, i);
                ms[p][bi][r] = replay_ms(g, st, e0, e1, reps, tm, 0);
                for (int i = 0; i < NSETS; i++) CU(cudaGraphExecDestroy(g[i]));
                printf(" %d %.4f", batches[bi], ms[p][bi][r]);
            }
            printf("\n");
            fflush(stdout);
        }
    for (int bi = 0; bi < nb; bi++) {
        float med[PMAX], v[ROUNDS], lo = 1e30f, hi = 0.f, rs = 0.f;
        printf("placements %d random:", batches[bi]);
        for (int p = 0; p < P; p++) {
            for (int r = 0; r < ROUNDS; r++) v[r] = (float)ms[p][bi][r];
            float mn = v[0], mx = v[0];
            for (int r = 1; r < ROUNDS; r++) mn = v[r] < mn ? v[r] : mn, mx = v[r] > mx ? v[r] : mx;
            rs = mx / mn - 1.f > rs ? mx / mn - 1.f : rs;
            med[p] = median(v, ROUNDS);
            lo = med[p] < lo ? med[p] : lo;
            hi = med[p] > hi ? med[p] : hi;
            printf(" %.4f", med[p]);
        }
        printf(" ms; between placements %.1f %%, between rounds (worst placement) %.1f %%\n", 100.f * (hi / lo - 1.f),
               100.f * rs);
    }
    free(tm);
    for (int p = 1; p < P; p++) {
        for (int l = 0; l < NLAYERS; l++) moe_cuda_layer_free(&Lp[p][l]);
        CU(cudaFree(spacer[p]));
    }
    return 0;
}

static int bench_moe(int argc, char **argv)
{
    const char *out_path = NULL, *peer_path = NULL, *commit = "unknown";
    int batches[16] = {1, 4, 8, 16, 32, 64, 128, 256, 512}, nb = 9, reps = 6, tune[8][NTUNE], ntune = 0, skew_only = -1, trace = 0, stages = 0,
        no_shared = 0, stream_mode = 0, placements = 0, sustain = 0, row_cool_ms = 0, power_ms = 0;
    variant_defaults();
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--peer") && i + 1 < argc) peer_path = argv[++i];
        else if (!strcmp(argv[i], "--commit") && i + 1 < argc) commit = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variants") && i + 1 < argc) {   /* launch variants (moe_cuda_ws) */
            /* VARIANTS_USAGE: early PDL E (0/1), 128-row down items from batch R,
             * 16-token router logits tiles from batch L, router logits in K parts for T <= KT (default 16), the
             * one-launch layer for T <= F % 100 (default 0 = never) with moe_fused_args.opt F / 100, tensor-core
             * router logits from batch TC (default 8), 2-tile launch overlap OV (moe_cuda_ws.nt2_overlap,
             * default 0), the shared expert's own launches from batch SH (default 9), on a second stream FK
             * (moe_cuda_ws.shared_fork: 1 before the router (default), 2 after it, 3 after the logits), tiles
             * handed out to warps DY (moe_cuda_ws.dyn_items, bit 0 the 1-tile launches, bit 1 the 2-tile ones,
             * default 1) up to batch DM (moe_cuda_ws.dyn_max_t, default 320), each stage's 2-tile launch first
             * NO (moe_cuda_ws.nt2_first, default 0), L2 prefetch PF (moe_cuda_ws.pf, default 0) up to batch PM
             * (default 8) with PD MB of routed down weights (default 24), the 1-tile stages as one launch FU (moe_cuda_ws.fuse1, default 3) from batch FM (default 9),
             * top-k and lists as one launch up to batch TL (default 4), the shared launches at the highest
             * priority SP (moe_cuda_ws.side_prio, default 0), T <= FS (<= 8) as one expert launch (moe_cuda_ws.fuse_small,
             * default 8) with routed gate/up tiles in KG K parts (default 2) up to batch KX (default 1), the
             * shared gate/up tiles in KH (default 4) and SR 16-row tiles per down item (default 2), the shared gate/up
             * before the wait on the lists up to batch ES (moe_cuda_ws.fs_early_sh_max_t, default 4), routed experts with up to
             * T1 tokens in 8-token chunks of the 1-tile launches (moe_cuda_ws.tok1_max, default 16) up to batch TT
             * (default 128) from batch TN (default 64), the top-k launch alone on its SMs up to batch TX
             * (moe_cuda_ws.topk_excl_max_t, default 0) from batch TM (default 9), each token's top-k over 8 warps
             * up to batch TG (moe_cuda_ws.topk_group_max_t, default 4), every routed expert in the 2-tile launches
             * from batch TA (moe_cuda_ws.nt2_all_min_t, default 512; 0 = never), the shared gate/up in 64-token blocks from
             * batch SX (moe_cuda_ws.shared_xl_min_t, default 512; 0 = never), the shared expert on wgmma from batch
             * SW (moe_cuda_ws.shared_wg_min_t, default 0 = never), with the block scales folded where they are
             * powers of two SF (shared_wg_fold, default 1) and 128-token blocks from batch SN (shared_wg_n128_min_t,
             * default 512), routed experts with more than XT tokens (moe_cuda_ws.x4_tok, default 32) in the wide
             * launches from batch X4 (moe_cuda_ws.x4_min_t, default 224; 0 = never), in the fused launches the wide
             * gate/up after the 2-tile down (XE 0), the 2-tile gate/up (1, default) or the fused launch (2)
             * (moe_cuda_ws.x4_early), above batch TL each token's top-k one block of 8 warps up to batch TB
             * (moe_cuda_ws.topk_blocks_max_t, default every batch), the lists launch with its pairs in registers up to
             * batch LR (moe_cuda_ws.lists_runs_max_t, default every batch), the tensor-core logits launch's shape LG
             * (moe_cuda_ws.logits_tc_shape: 10 n-tiles + K parts, default 0 = by batch), the one expert launch at 5
             * blocks per SM from batch FN to FX (moe_cuda_ws.fs_b5_min_t, fs_b5_max_t, default 0-0: none), the combine
             * released early up to batch CE (moe_cuda_ws.fs_cmb_early_max_t, default 8), the shared gate/up's blocks
             * with the batch rounded up to 16, 32 or (above 48) 64 tokens up to batch HT (moe_cuda_ws.shared_tile_max_t, default 64;
             * 0: 16 tokens up to 64), the shared expert as two bf16 GEMMs from batch SG (moe_cuda_ws.shared_gemm_min_t,
             * default 256; 0 = never), on wgmma where the scales fold GW (moe_cuda_ws.shared_gemm_wg, default 4; 2: a wgmma group in flight, 3: and one m64n256k16, 4: and the tiles by TMA); each
             * measured in turn, the JSON holds the last */
            for (char *t = strtok(argv[++i], "/"); t && ntune < 8; t = strtok(NULL, "/")) {
                int n = 0;
                for (char *c = t, *e; n < NTUNE && *c; c = *e == ',' ? e + 1 : e, n++) {
                    tune[ntune][n] = (int)strtol(c, &e, 10);
                    if (e == c) { n = -1; break; }
                }
                if (n < 4) { fprintf(stderr, "sluice-bench: --variants " VARIANTS_USAGE "\n"); return 2; }
                for (; n < NTUNE; n++) tune[ntune][n] = variant_dflt[n];
                ntune++;
            }
        } else if (!strcmp(argv[i], "--default-variant")) {   /* the default --variants entry, named (no GPU) */
            return print_default_variant();
        } else if (!strcmp(argv[i], "--stages")) {   /* per batch: each stage's start and end in the graph */
            stages = 1;
        } else if (!strcmp(argv[i], "--item-log")) {   /* with --stages, MOE_TRACE_ITEMS builds: every T <= 8 item */
            stages = 1;
            g_item_log = 1;
        } else if (!strcmp(argv[i], "--stream")) {   /* per batch also the forward outside a graph (v21) */
            stream_mode = 1;
        } else if (!strcmp(argv[i], "--placements") && i + 1 < argc) {   /* the weights at P places (v21) */
            placements = atoi(argv[++i]);
            if (placements < 2 || placements > 8) { fprintf(stderr, "sluice-bench: --placements 2..8\n"); return 2; }
        } else if (!strcmp(argv[i], "--power") && i + 1 < argc) {   /* v41: energy per replay over MS ms */
            power_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--sustain") && i + 1 < argc) {   /* per row R rounds of 8 replays (v25) */
            sustain = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--row-cool") && i + 1 < argc) {   /* ms of idle GPU before each row (v25) */
            row_cool_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--no-shared")) {   /* the layer without its shared expert (what it costs) */
            no_shared = 1;
        } else if (!strcmp(argv[i], "--trace")) {   /* timeline of the one-launch layer's items */
            trace = 1;
        } else if (!strcmp(argv[i], "--routing") && i + 1 < argc) {   /* random | skewed (default both) */
            ++i;
            skew_only = !strcmp(argv[i], "skewed") ? 1 : !strcmp(argv[i], "random") ? 0 : -2;
            if (skew_only == -2) { fprintf(stderr, "sluice-bench: --routing random|skewed\n"); return 2; }
        } else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            nb = 0;
            for (char *t = strtok(argv[++i], ","); t && nb < 16; t = strtok(NULL, ",")) batches[nb++] = atoi(t);
        } else {
            fprintf(stderr, "usage: sluice-bench moe [--out FILE] [--peer FILE] [--commit SHA] [--batches 1,4,...] [--reps N] [--variants " VARIANTS_USAGE "] [--routing random|skewed] [--trace] [--stages] [--item-log] [--stream] [--placements P] [--no-shared] [--sustain R] [--row-cool MS] [--power MS] [--default-variant]\n");
            return 2;
        }
    }
    for (int i = 0; i < nb; i++)
        if (batches[i] < 1 || batches[i] > MAXB) { fprintf(stderr, "sluice-bench: batch %d out of 1..%d\n", batches[i], MAXB); return 2; }
    if (peer_path) load_peer(peer_path);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { fprintf(stderr, "sluice-bench: no CUDA device\n"); return 77; }
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));

    /* HBM read ceiling: 8 GiB, median of 7 */
    const size_t nread = (size_t)8 << 30;
    void *big; unsigned *sink;
    CU(cudaMalloc(&big, nread)); CU(cudaMalloc((void **)&sink, 4096 * sizeof(unsigned)));
    CU(cudaMemset(big, 0x5a, nread));
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0)); CU(cudaEventCreate(&e1));
    float *mhz_d;   /* moe_sm_mhz's result (the warm-up: v25 run 5's first reading came out 0, the race v40 fixed) */
    CU(cudaMalloc((void **)&mhz_d, sizeof(float)));
    (void)sm_mhz_now(mhz_d, 0);
    const double ceiling = read_ceiling(big, nread, sink, e0, e1);
    printf("gpu %s, HBM read ceiling %.3f TB/s (8 GiB read)\n", prop.name, ceiling);
    nvml_t nv = {0};
    if (power_ms > 0 && nvml_open(&nv)) return 1;
    cudaStream_t st, side;   /* side: sm_mhz_during's probe, and --power's */
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    {   /* v42: what a replay costs with no work in it */
        float *ftm = malloc((size_t)64 * NSETS * sizeof(float));
        graph_floor(st, e0, e1, ftm);
        free(ftm);
    }
    if (power_ms > 0) {   /* v41: the read kernel's and the idle GPU's energy, then each row's */
        const power_work rd = {NULL, big, nread, sink, 0, 0, 0, 0};
        const power_row idle = power_run(&nv, &rd, 0, 1000, st, side, mhz_d), r = power_run(&nv, &rd, 1, power_ms, st, side, mhz_d);
        printf("  power idle: %.0f W over %.2f s\n", idle.watts, idle.s);
        power_print("read", &r, nread);
        /* v42 (1): the same read over random bytes, as the expert weights are: the ceiling's buffer holds one byte
           value (memset), and moving random bits costs ~40-55 % more energy per byte at the same rate */
        CU(moe_fill_bytes((uint8_t *)big, nread, 4242u, 0, 0, 0, 0));
        const double cr = read_ceiling(big, nread, sink, e0, e1);
        const power_row rr = power_run(&nv, &rd, 1, power_ms, st, side, mhz_d);
        char what[64];
        snprintf(what, sizeof what, "read, random bytes (burst %.3f TB/s)", cr);
        power_print(what, &rr, nread);
    }
    CU(cudaFree(big));

    moe_cuda_shape s = {.n_experts = 256, .hidden = 4096, .inter = 2048, .topk = 6, .score_func = MOE_SCORE_SQRTSOFTPLUS,
                        .route_scale = 1.5f, .swiglu_limit = 10.f, .has_shared = !no_shared, .fp4_fmt = QT_NVFP4,
                        .shared_bf16 = 1};
    const int E = s.n_experts, H = s.hidden;
    float *gate = malloc((size_t)E * H * sizeof(float)), *bias = calloc(E, sizeof(float)), *bias_sk = calloc(E, sizeof(float));
    uint32_t r = 12345;
    for (size_t i = 0; i < (size_t)E * H; i++) { r = r * 1664525u + 1013904223u; gate[i] = ((r >> 8) / 16777216.0f - 0.5f) * 0.05f; }
    for (int e = 0; e < 6; e++) bias_sk[e] = 100.f;   /* skewed: every token picks experts 0..5 */
    moe_cuda_layer L[NLAYERS];
    for (int l = 0; l < NLAYERS; l++) make_layer(&L[l], &s, (uint32_t)l + 1, gate, bias);
    moe_cuda_ws W;
    if (moe_cuda_ws_init(&W, &L[0], MAXB)) return 1;
    uint16_t *x[NSETS]; float *out; int32_t *tok;
    for (int i = 0; i < NSETS; i++) {
        CU(cudaMalloc((void **)&x[i], (size_t)MAXB * H * 2));
        CU(moe_fill_bf16(x[i], (size_t)MAXB * H, 777u + (uint32_t)i, 2.f, 0));
    }
    CU(cudaMalloc((void **)&out, (size_t)MAXB * H * 4)); CU(cudaMalloc((void **)&tok, MAXB * 4));
    CU(cudaDeviceSynchronize());
    printf("layer: %d experts x %.2f MB (NVFP4 + scales), shared FP8 %.2f MB, %d weight sets, %d input sets; grid gu %d/%d/%d dn %d/%d/%d\n",
           E, L[0].expert_bytes / 1e6, L[0].shared_bytes / 1e6, NLAYERS, NSETS, W.grid_gu[0], W.grid_gu[1],
           W.grid_gu[2], W.grid_dn[0], W.grid_dn[1], W.grid_dn[2]);

    if (placements) {   /* only the placement experiment (random routing, the default launch variant) */
        const int rc = bench_placements(L, &s, gate, bias, &W, x, tok, out, st, e0, e1, batches, nb, reps, placements);
        for (int l = 0; l < NLAYERS; l++) moe_cuda_layer_free(&L[l]);
        moe_cuda_ws_free(&W);
        free(gate); free(bias); free(bias_sk);
        return rc;
    }
    char *rows = calloc(1, 1 << 16);
    size_t rl = 0;
    int32_t *idx = malloc((size_t)MAXB * 6 * sizeof(int32_t));
    for (int v = 0; v < (ntune ? ntune : 1); v++) {
    if (ntune)
        for (int n = 0; n < NTUNE; n++) tune_set(&W, n, tune[v][n]);
    printf("variant: early PDL %d, 128-row down items from batch %d, 16-token logits tiles from batch %d, logits K parts %d "
           "up to batch %d, one-launch layer up to batch %d (opt %d), tensor-core logits from batch %d, 2-tile overlap %d, "
           "shared expert launches from batch %d (second stream %d), tiles handed out %d up to batch %d, 2-tile launches first %d, L2 prefetch %d up to batch %d (%d MB down), fused 1-tile stages %d from batch %d, top-k + lists one launch up to batch %d, shared priority %d, one expert launch %d (K parts %d up to batch %d, shared %d, down %d tiles, shared gate/up before the lists up to batch %d), 1-tile launches for experts with up to %d tokens at batches %d-%d, top-k alone on its SMs at batches %d-%d, grouped top-k up to batch %d, every expert 2-tile from batch %d, 64-token shared gate/up blocks from batch %d, shared expert on wgmma from batch %d (folded scales %d, 128-token blocks from %d), wide launches from batch %d for experts with > %d tokens (early %d), top-k blocks above the one-launch router up to batch %d, lists from registers up to batch %d, tensor-core logits shape %d, one expert launch at 5 blocks per SM at batches %d-%d, the combine released early up to batch %d, shared gate/up token tile rounded up (16, 32, above 48 64) up to batch %d, shared expert as bf16 GEMMs from batch %d (wgmma %d)\n",
           W.early_pdl, W.down_rm_min_t, W.logits16_min_t, W.logits_ks, W.logits_ks_max_t, W.fused_max_t, W.fused_opt,
           W.logits_tc_min_t, W.nt2_overlap, W.shared_min_t, W.shared_fork, W.dyn_items, W.dyn_max_t, W.nt2_first, W.pf, W.pf_max_t, W.pf_dn_mb, W.fuse1, W.fuse1_min_t, W.topk_lists_max_t, W.side_prio, W.fuse_small, W.fs_ks_gu, W.fs_ks_max_t, W.fs_ks_sh, W.fs_rm, W.fs_early_sh_max_t, W.tok1_max, W.tok1_min_t, W.tok1_max_t, W.topk_excl_min_t, W.topk_excl_max_t, W.topk_group_max_t, W.nt2_all_min_t, W.shared_xl_min_t, W.shared_wg_min_t, W.shared_wg_fold, W.shared_wg_n128_min_t, W.x4_min_t, W.x4_tok, W.x4_early, W.topk_blocks_max_t, W.lists_runs_max_t, W.logits_tc_shape,
           W.fs_b5_min_t, W.fs_b5_max_t, W.fs_cmb_early_max_t, W.shared_tile_max_t, W.shared_gemm_min_t,
           W.shared_gemm_wg);
    rl = 0;
    printf("%6s %8s %10s %10s %8s %7s %9s %7s %10s %7s %9s\n", "batch", "routing", "ms", "MB", "TB/s", "%ceil", "peer_ms", "x peer",
           "queued", "SM MHz", "launch us");
    for (int sk = 0; sk < 2; sk++) {
        if (skew_only >= 0 && sk != skew_only) continue;
        const char *routing = sk ? "skewed" : "random";
        for (int l = 0; l < NLAYERS; l++)
            if (moe_cuda_set_router(&L[l], gate, sk ? bias_sk : bias, NULL)) return 1;
        for (int bi = 0; bi < nb; bi++) {
            const int T = batches[bi];
            cudaGraphExec_t g[NSETS];
            double bytes = 0;
            for (int i = 0; i < NSETS; i++) {
                capture_graph(&g[i], L, &W, x, tok, T, out, st, i);
                /* bytes of this set: touched experts + shared + router gate + activations */
                CU(cudaMemcpy(idx, W.idx, (size_t)T * 6 * 4, cudaMemcpyDeviceToHost));
                unsigned char touched[256] = {0};
                int nt = 0;
                for (int j = 0; j < T * 6; j++) if (!touched[idx[j]]) touched[idx[j]] = 1, nt++;
                bytes += (double)nt * L[0].expert_bytes + L[0].shared_bytes + (double)E * H * 4 + (double)T * H * 2;
            }
            bytes /= NSETS;
            float *tm = malloc((size_t)reps * NSETS * sizeof(float));
            if (row_cool_ms > 0) {   /* v25: the GPU idle before the row, so it starts at the clock a cool GPU has */
                const struct timespec ts = {row_cool_ms / 1000, (long)(row_cool_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            /* the reading, then the same graphs with each replay queued behind the hold */
            const double ms = replay_ms(g, st, e0, e1, reps, tm, 0), tbs = bytes / (ms * 1e-3) / 1e12,
                         launch_us = g_launch_us;
            /* v25: the SM clock the replays leave (run 4: under sustained load the 700 W cap takes it from ~1.98
               GHz to 1.1-1.6, and batches 64-512 slow with it) */
            const float mhz = sm_mhz_now(mhz_d, st);
            /* v40: the clock during one more replay (a one-thread probe on a side stream over 80 % of the reading,
               launched just before it): under the power cap the clock after a reading has drained is not the one it
               ran at (bench/NOTES.md v40 (5)) */
            const float mhz_in = sm_mhz_during(g[0], ms, mhz_d, st, side);
            if (getenv("SLUICE_BENCH_SPREAD"))
                printf("  clock %d %s: %.0f MHz during a replay, %.0f after the reading\n", T, routing, mhz_in, mhz);
            const double msq = replay_ms(g, st, e0, e1, reps, tm, 1);
            const double pm = peer_ms(T, routing, 0), pmq = peer_ms(T, routing, 1);
            printf("%6d %8s %10.4f %10.1f %8.3f %6.1f%% %9.4f %7.2f %10.4f %7.0f %9.1f\n", T, routing, ms, bytes / 1e6, tbs,
                   100 * tbs / ceiling, pm, pm > 0 ? pm / ms : 0.0, msq, mhz, launch_us);
            char pms[32] = "null", pmqs[64] = "";
            if (pm > 0) snprintf(pms, sizeof pms, "%.5f", pm);
            if (pmq > 0) snprintf(pmqs, sizeof pmqs, ", \"peer_ms_queued\": %.5f", pmq);
            rl += (size_t)snprintf(rows + rl, (1 << 16) - rl,
                                   "%s\n  {\"batch\": %d, \"routing\": \"%s\", \"ms\": %.5f, \"bytes\": %.0f, "
                                   "\"tb_per_s\": %.4f, \"pct_of_ceiling\": %.2f, \"peer_ms\": %s, \"ms_queued\": %.5f, \"sm_mhz\": %.0f, \"sm_mhz_during\": %.0f, \"host_launch_us\": %.1f%s}",
                                   rl ? "," : "", T, routing, ms, bytes, tbs, 100 * tbs / ceiling, pms, msq, mhz, mhz_in, launch_us,
                                   pmqs);
            if (stages) stage_timeline(g, st, T, routing);
            if (power_ms > 0) {   /* v41: the row's graphs back to back: power, energy per replay and per byte */
                const power_work pw = {g, NULL, 0, NULL, 0, 0, 0, 0};
                const power_row r = power_run(&nv, &pw, NSETS, power_ms, st, side, mhz_d);
                printf("  power %d %s: %d replays in %.2f s, %.4f ms each (%.3f TB/s), %.0f W, %.4f J per replay, %.1f pJ per "
                       "byte; SM %.0f MHz (NVML), %.0f (probe); window %.3f %.3f\n", T, routing, r.n, r.s, r.ms_per,
                       bytes / (r.ms_per * 1e-3) / 1e12, r.watts, r.j_per, r.j_per / bytes * 1e12, r.nvml_mhz, r.probe_mhz,
                       r.w0, r.w1);
            }
            if (sustain > 0) {   /* v25: does sustained load slow the replays (the power cap)? each round's median
                                    of 8 back-to-back replays, then the SM clock it leaves */
                float *rt = malloc((size_t)sustain * 2 * sizeof(float));
                for (int rr = 0; rr < sustain; rr++) {
                    rt[2 * rr] = (float)replay_ms(g, st, e0, e1, 1, tm, 0);
                    rt[2 * rr + 1] = sm_mhz_now(mhz_d, st);
                }
                printf("  sustain %d %s (ms/MHz per round of 8 replays):", T, routing);
                for (int rr = 0; rr < sustain; rr++) printf(" %.4f/%.0f", rt[2 * rr], rt[2 * rr + 1]);
                printf("\n");
                free(rt);
            }
            if (stream_mode) {   /* the same forward issued on the stream, no graph: median of reps x sets */
                for (int rr = 0; rr < reps * NSETS; rr++) {
                    CU(cudaEventRecord(e0, st));
                    if (moe_cuda_forward(&L[rr % NLAYERS], &W, x[rr % NSETS], tok, T, out, st)) return 1;
                    CU(cudaEventRecord(e1, st));
                    CU(cudaEventSynchronize(e1)); CU(cudaEventElapsedTime(&tm[rr], e0, e1));
                }
                printf("  stream %d %s: %.4f ms (graph %.4f)\n", T, routing, median(tm, reps * NSETS), ms);
                if (stages) stream_timeline(L, &W, x, tok, out, st, T, routing);
            }
            for (int i = 0; i < NSETS; i++) CU(cudaGraphExecDestroy(g[i]));
            free(tm);
        }
    }
        /* where the time goes: events between the stages (no graph), random routing, median over sets */
        {
            static const char *names[6] = {"logits", "topk", "lists", "gate/up", "down", "combine"};
            const int sb[4] = {1, 8, 64, 512};
            cudaEvent_t ev[7];
            for (int i = 0; i < 7; i++) CU(cudaEventCreate(&ev[i]));
            for (int l = 0; l < NLAYERS; l++)
                if (moe_cuda_set_router(&L[l], gate, bias, NULL)) return 1;
            printf("stage breakdown (us, events, no graph):%*s", 1, "");
            for (int i = 0; i < 6; i++) printf(" %9s", names[i]);
            printf(" %9s\n", "total");
            for (int bi = 0; bi < 4; bi++) {
                float st_us[7][NSETS * 2];
                for (int rr = 0; rr < NSETS * 2; rr++) {
                    if (moe_cuda_forward_timed(&L[rr % NLAYERS], &W, x[rr % NSETS], tok, sb[bi], out, st, ev)) return 1;
                    CU(cudaStreamSynchronize(st));
                    for (int i = 0; i < 6; i++) {
                        float v;
                        CU(cudaEventElapsedTime(&v, ev[i], ev[i + 1]));
                        st_us[i][rr] = 1000 * v;
                    }
                    float v;
                    CU(cudaEventElapsedTime(&v, ev[0], ev[6]));
                    st_us[6][rr] = 1000 * v;
                }
                printf("  batch %4d %27s", sb[bi], "");
                for (int i = 0; i < 7; i++) printf(" %9.1f", median(st_us[i], NSETS * 2));
                printf("\n");
            }
            for (int i = 0; i < 7; i++) cudaEventDestroy(ev[i]);
        }
    }   /* variants */
    if (trace) fused_timeline(L, &W, x, tok, out, st, gate, bias);
    if (out_path) {
        char cmd[1024] = "";
        const char *env_cmd = getenv("BENCH_COMMAND");   /* the command that made this run, if a script ran us */
        if (env_cmd) snprintf(cmd, sizeof cmd, "%s", env_cmd);
        else for (int i = 0; i < argc; i++) {
            if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "--commit")) { i++; continue; }
            strncat(cmd, i ? " " : "", sizeof cmd - strlen(cmd) - 1);
            strncat(cmd, i == 0 ? "sluice-bench" : argv[i], sizeof cmd - strlen(cmd) - 1);
        }
        for (char *c = cmd; *c; c++)   /* keep the JSON string valid */
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '\'';
        FILE *f = fopen(out_path, "w");
        if (!f) { fprintf(stderr, "sluice-bench: cannot write %s\n", out_path); return 1; }
        fprintf(f, "{\"gpu\": \"%s\", \"commit\": \"%s\", \"command\": \"%s\",\n \"read_ceiling_tb_per_s\": %.4f,\n"
                   " \"timing\": \"%s\",\n \"rows\": [%s\n ]}\n", prop.name, commit, cmd, ceiling,
                "ms: each replay launched onto an idle stream between its events; ms_queued: the same replays each "
                "queued behind a 50 us hold kernel (no host submission gap); sm_mhz: the SM clock over 50 us once the "
                "ms replays have drained; sm_mhz_during: over one more replay",
                rows);
        if (fclose(f) != 0) { fprintf(stderr, "sluice-bench: writing %s failed\n", out_path); return 1; }
    }
    free(rows);
    CU(cudaFree(mhz_d));
    for (int l = 0; l < NLAYERS; l++) moe_cuda_layer_free(&L[l]);
    moe_cuda_ws_free(&W);
    free(gate); free(bias); free(bias_sk); free(idx);
    return 0;
}

/* sluice-bench stream: the compute-free streaming probe (moe_stream_read) for the stream counts, lengths
 * and ring depths the expert kernels use, beside the HBM read ceiling, in one process. Regions are
 * contiguous per warp and move through an 8 GiB buffer between repeats so L2 never holds them. */
static int bench_stream(int argc, char **argv)
{
    const char *out_path = NULL;
    int power_ms = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--power") && i + 1 < argc) power_ms = atoi(argv[++i]);   /* v42 */
        else {
            fprintf(stderr, "usage: sluice-bench stream [--out FILE] [--power MS]\n");
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { fprintf(stderr, "sluice-bench: no CUDA device\n"); return 77; }
    const size_t nbuf = (size_t)8 << 30;
    void *big; unsigned *sink;
    CU(cudaMalloc(&big, nbuf)); CU(cudaMalloc((void **)&sink, 65536 * sizeof(unsigned)));
    CU(moe_fill_bytes((uint8_t *)big, nbuf, 99u, 0, 0, 0, 0));
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0)); CU(cudaEventCreate(&e1));
    float tv[16];
    const double ceiling = read_ceiling(big, nbuf, sink, e0, e1);
    printf("HBM read ceiling %.3f TB/s (8 GiB read)\n", ceiling);
    if (power_ms > 0) {   /* v42: energy per byte of the read kernel and of the steady streams, by how they read */
        nvml_t nv = {0};
        if (nvml_open(&nv)) return 1;
        cudaStream_t st, side;
        float *mhz_d;
        CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CU(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        CU(cudaMalloc((void **)&mhz_d, sizeof(float)));
        const power_work rd = {NULL, big, nbuf, sink, 0, 0, 0, 0};
        const power_row idle = power_run(&nv, &rd, 0, 1000, st, side, mhz_d);
        printf("  power idle: %.0f W over %.2f s\n", idle.watts, idle.s);
        static const int pcfg[][4] = {{0, 0, 0, 0},      {2640, 512, 4, 0}, {2640, 512, 4, 1},
                                      {2640, 512, 4, 2}, {2640, 512, 8, 2}, {0, 0, 0, 0}};   /* {warps, chunks, depth, mode} */
        static const char *mname[] = {"ring, one word read back", "ring, every byte read back", "registers, no ring"};
        for (int c = 0; c < (int)(sizeof pcfg / sizeof pcfg[0]); c++) {
            const power_work w = {NULL, big, nbuf, sink, pcfg[c][0], pcfg[c][1], pcfg[c][2], pcfg[c][3]};
            const size_t bytes = w.sw ? (size_t)w.sw * w.sn * 1152 : nbuf;
            const power_row r = power_run(&nv, &w, 4, power_ms, st, side, mhz_d);
            power_print(w.sw ? "stream" : "read kernel", &r, bytes);
            if (w.sw) printf("    (%d warps x %d chunks, depth %d, %s)\n", w.sw, w.sn, w.sd, mname[w.sm]);
        }
        CU(cudaStreamDestroy(st)); CU(cudaStreamDestroy(side)); CU(cudaFree(mhz_d));
    }
    /* {warps, chunks per warp, ring depth}: 768 x 64 = routed gate/up tiles at batch 1 (6 experts x 128
     * tiles of 16 rows, 73.7 KB each), 3072 x 16 = the same bytes K-split in four, 2640 = every warp of
     * the 5-blocks/SM grid, 512 chunks = steady state */
    static const int cfg[][3] = {{768, 64, 8},   {768, 64, 16},  {3072, 16, 8}, {2640, 16, 8}, {2640, 64, 4},
                                 {2640, 64, 8},  {2640, 64, 16}, {768, 512, 8}, {2640, 512, 4}, {2640, 512, 8},
                                 {2640, 512, 16}};
    const int ncfg = (int)(sizeof cfg / sizeof cfg[0]);
    char rows[8192];
    size_t rl = 0;
    printf("%6s %7s %6s %10s %9s %8s %7s\n", "warps", "chunks", "depth", "MB", "us", "TB/s", "%ceil");
    for (int c = 0; c < ncfg; c++) {
        const int w = cfg[c][0], n = cfg[c][1], d = cfg[c][2];
        const size_t stride = (size_t)n * 1152, bytes = stride * w;
        for (int r = 0; r < 8; r++) {
            const size_t off = region_off(r, 0, nbuf, bytes);
            CU(cudaEventRecord(e0, 0));
            CU(moe_stream_read((const uint8_t *)big + off, w, stride, n, d, 0, sink, 0));
            CU(cudaEventRecord(e1, 0));
            CU(cudaEventSynchronize(e1));
            if (r) CU(cudaEventElapsedTime(&tv[r - 1], e0, e1));
        }
        const double ms = median(tv, 7), tbs = bytes / (ms * 1e-3) / 1e12;
        printf("%6d %7d %6d %10.1f %9.1f %8.3f %6.1f%%\n", w, n, d, bytes / 1e6, ms * 1e3, tbs, 100 * tbs / ceiling);
        rl += (size_t)snprintf(rows + rl, sizeof rows - rl,
                               "%s\n  {\"warps\": %d, \"chunks\": %d, \"depth\": %d, \"bytes\": %zu, \"us\": %.2f, "
                               "\"tb_per_s\": %.4f, \"pct_of_ceiling\": %.2f}",
                               rl ? "," : "", w, n, d, bytes, ms * 1e3, tbs, 100 * tbs / ceiling);
    }
    /* v24: the same one-shot streams after a touch (moe_touch, one word per 64 KB) of another region of the same
     * size (0: the translations cold, as above, behind the same kind of launch), of the region itself (1), or of
     * the 4 GiB around it (2): whether a one-shot stream's fixed cost is its address translations */
    static const int tcfg[][3] = {{768, 64, 8}, {2640, 16, 8}, {2640, 64, 8}, {2640, 512, 8}};
    char trows[4096];
    size_t tl = 0;
    printf("one-shot streams after a touch (us; 0: another region, 1: the region, 2: the 4 GiB around it)\n");
    printf("%6s %7s %6s %10s %9s %9s %9s\n", "warps", "chunks", "depth", "MB", "touch0", "touch1", "touch2");
    for (int c = 0; c < (int)(sizeof tcfg / sizeof tcfg[0]); c++) {
        const int w = tcfg[c][0], n = tcfg[c][1], d = tcfg[c][2];
        const size_t stride = (size_t)n * 1152, bytes = stride * w, span = (size_t)4 << 30;
        double us[3];
        for (int mode = 0; mode < 3; mode++) {
            for (int r = 0; r < 8; r++) {
                const size_t off = region_off(r, (size_t)3 << 30, nbuf, bytes);
                const size_t other = (off + nbuf / 2) % (nbuf - bytes) & ~(size_t)4095;
                size_t t0 = off, tn = bytes;
                if (mode == 0) t0 = other;
                if (mode == 2) { t0 = off > span / 2 ? off - span / 2 : 0; tn = t0 + span <= nbuf ? span : nbuf - t0; }
                CU(moe_touch((const uint8_t *)big + t0, tn, 65536, sink, 0));
                CU(cudaEventRecord(e0, 0));
                CU(moe_stream_read((const uint8_t *)big + off, w, stride, n, d, 0, sink, 0));
                CU(cudaEventRecord(e1, 0));
                CU(cudaEventSynchronize(e1));
                if (r) CU(cudaEventElapsedTime(&tv[r - 1], e0, e1));
            }
            us[mode] = median(tv, 7) * 1e3;
        }
        printf("%6d %7d %6d %10.1f %9.1f %9.1f %9.1f\n", w, n, d, bytes / 1e6, us[0], us[1], us[2]);
        tl += (size_t)snprintf(trows + tl, sizeof trows - tl,
                               "%s\n  {\"warps\": %d, \"chunks\": %d, \"depth\": %d, \"bytes\": %zu, \"us_other_touched\": %.2f, "
                               "\"us_region_touched\": %.2f, \"us_4gib_touched\": %.2f}",
                               tl ? "," : "", w, n, d, bytes, us[0], us[1], us[2]);
    }
    if (out_path) {
        FILE *f = fopen(out_path, "w");
        if (!f) { fprintf(stderr, "sluice-bench: cannot write %s\n", out_path); return 1; }
        fprintf(f, "{\"read_ceiling_tb_per_s\": %.4f, \"chunk_bytes\": 1152, \"rows\": [%s\n], \"touch_rows\": [%s\n]}\n",
                ceiling, rows, trows);
        if (fclose(f) != 0) { fprintf(stderr, "sluice-bench: writing %s failed\n", out_path); return 1; }
    }
    cudaFree(big);
    cudaFree(sink);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "moe")) return bench_moe(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "stream")) return bench_stream(argc, argv);
    fprintf(stderr, "usage: sluice-bench moe [--out FILE] [--peer FILE] [--commit SHA] [--batches 1,4,...] [--reps N]\n"
                    "       sluice-bench stream [--out FILE] [--power MS]\n");
    return argc >= 2 && !strcmp(argv[1], "--help") ? 0 : 2;
}
#endif

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

/* every row is also timed with each replay queued behind a 50 us hold kernel (ms_queued), so its start
 * event fires only when the GPU is ready to run it: the pair then holds no host submission gap. The first
 * run (`sluice-bench moe`) read the two within -2.2..+1.2 % (no gap at batches 1-8, where a host gap would
 * weigh most), so ms stays the unqueued reading every run before made and ms_queued goes beside it. */
#define HOLD_NS 50000ull

/* the SM clock (MHz) the work queued on st before it left: moe_sm_mhz over 50 us, into d (one float). st is
 * non-blocking, so the legacy-stream cudaMemcpy did not wait for the probe and every reading was the one before it
 * (the JSON's sm_mhz from to the previous row's, or the process's warm-up for the first); now it waits. */
static float sm_mhz_now(float *d, cudaStream_t st)
{
    float mhz;
    CU(moe_sm_mhz(50000ull, d, st));
    CU(cudaStreamSynchronize(st));
    CU(cudaMemcpy(&mhz, d, sizeof mhz, cudaMemcpyDeviceToHost));
    return mhz;
}
/* the SM clock while graph g replays (ms long) on st: moe_sm_mhz over 80 % of ms on the side stream, launched
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

/* The peer file (bench/moe_peer.py) holds lines "batch routing ms [ms_queued]" (the fourth from ). */
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
    /* 2^-10 (was 1e-3): a power of two, as DeepSeek's ue8m0 block scales are (moe_cuda_layer.sh_pow2) */
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

/* --stages: one replay of each input set's graph with the stage trace on (moe_trace_set); per stage the
 * median over the sets of its first block start and last warp end, in us from the replay's first start */
static void stage_trace(cudaGraphExec_t *g, const moe_cuda_layer *L, moe_cuda_ws *W, uint16_t *const *x, int32_t *tok,
                        float *out, cudaStream_t st, int T, const char *routing);
static void stage_timeline(cudaGraphExec_t *g, cudaStream_t st, int T, const char *routing)
{
    stage_trace(g, NULL, NULL, NULL, NULL, NULL, st, T, routing);
}
/* the same trace of the forward issued on the stream (no graph) */
static void stream_timeline(const moe_cuda_layer *L, moe_cuda_ws *W, uint16_t *const *x, int32_t *tok, float *out,
                            cudaStream_t st, int T, const char *routing)
{
    stage_trace(NULL, L, W, x, tok, out, st, T, routing);
}
static void stage_trace(cudaGraphExec_t *g, const moe_cuda_layer *L, moe_cuda_ws *W, uint16_t *const *x, int32_t *tok,
                        float *out, cudaStream_t st, int T, const char *routing)
{
    static const char *nm[MOE_TR_SLOTS] = {"logits", "topk", "lists", "topk+lists", "gu1", "gu2", "fused1", "dn1",
                                           "dn2", "sh-gu", "sh-dn", "combine", "ticket", "topk-ld", "guw", "dnw"};
    unsigned long long *d, h[2 * MOE_TR_SLOTS];
    float b[MOE_TR_SLOTS][NSETS], e[MOE_TR_SLOTS][NSETS];
    int seen[MOE_TR_SLOTS] = {0};
    float evms[NSETS], span[NSETS];   /* each traced replay between events (ms) and its kernels' span (us) */
    cudaEvent_t ev[2];
    CU(cudaEventCreate(&ev[0])); CU(cudaEventCreate(&ev[1]));
    CU(cudaMalloc((void **)&d, sizeof h));
    for (int i = 0; i < NSETS; i++) {
        for (int k = 0; k < MOE_TR_SLOTS; k++) h[2 * k] = ~0ull, h[2 * k + 1] = 0;
        CU(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
        CU(moe_trace_set(d));
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

static double g_launch_us;   /* the last replay_ms's median host time inside cudaGraphLaunch (us) */
static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* ---- (--power MS): energy per replay under sustained load. NVML (libnvidia-ml, which ships with the driver) is
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
 * sluice-bench stream --power) one moe_stream_read of sw warps x sn chunks, depth sd, mode sm, from a place in the
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
    if (getenv("SLUICE_BENCH_SPREAD"))   /* where a row's readings lie (tm and lu sorted by median) */
        printf("  spread%s (ms p10 p50 p90 max; launch us p50 p90 max): %.4f %.4f %.4f %.4f; %.1f %.1f %.1f\n",
               hold ? " queued" : "", tm[n / 10], tm[n / 2], tm[n * 9 / 10], tm[n - 1], lu[nl / 2], lu[nl * 9 / 10], lu[nl - 1]);
    return med;
}

/* the floor under every row's replay, the graph's own start and end: graphs of n empty kernels (moe_empty),
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

/* --placements P: does where the weights land decide the 5 % spread between bench processes (batch 64
 * read 0.768 / 0.783 / 0.810 ms in the three processes of one call, `sluice-bench moe`; not the SM clock
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
    int batches[16] = {1, 4, 8, 16, 32, 64, 128, 256, 512}, nb = 9, reps = 6, skew_only = -1, stages = 0,
        no_shared = 0, stream_mode = 0, placements = 0, sustain = 0, row_cool_ms = 0, power_ms = 0, nset = 0;
    const char *sets[16];
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--peer") && i + 1 < argc) peer_path = argv[++i];
        else if (!strcmp(argv[i], "--commit") && i + 1 < argc) commit = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--set") && i + 1 < argc) {   /* force a plan field: NAME=VALUE (moe_plan) */
            if (nset == 16) { fprintf(stderr, "sluice-bench: at most 16 --set\n"); return 2; }
            sets[nset++] = argv[++i];
        } else if (!strcmp(argv[i], "--stages")) {   /* per batch: each stage's start and end in the graph */
            stages = 1;
        } else if (!strcmp(argv[i], "--stream")) {   /* per batch also the forward outside a graph */
            stream_mode = 1;
        } else if (!strcmp(argv[i], "--placements") && i + 1 < argc) {   /* the weights at P places */
            placements = atoi(argv[++i]);
            if (placements < 2 || placements > 8) { fprintf(stderr, "sluice-bench: --placements 2..8\n"); return 2; }
        } else if (!strcmp(argv[i], "--power") && i + 1 < argc) {   /* energy per replay over MS ms */
            power_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--sustain") && i + 1 < argc) {   /* per row R rounds of 8 replays */
            sustain = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--row-cool") && i + 1 < argc) {   /* ms of idle GPU before each row */
            row_cool_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--no-shared")) {   /* the layer without its shared expert (what it costs) */
            no_shared = 1;
        } else if (!strcmp(argv[i], "--routing") && i + 1 < argc) {   /* random | skewed (default both) */
            ++i;
            skew_only = !strcmp(argv[i], "skewed") ? 1 : !strcmp(argv[i], "random") ? 0 : -2;
            if (skew_only == -2) { fprintf(stderr, "sluice-bench: --routing random|skewed\n"); return 2; }
        } else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            nb = 0;
            for (char *t = strtok(argv[++i], ","); t && nb < 16; t = strtok(NULL, ",")) batches[nb++] = atoi(t);
        } else {
            fprintf(stderr, "usage: sluice-bench moe [--out FILE] [--peer FILE] [--commit SHA] [--batches 1,4,...] [--reps N] [--set NAME=VALUE]... [--routing random|skewed] [--stages] [--stream] [--placements P] [--no-shared] [--sustain R] [--row-cool MS] [--power MS]\n");
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
    float *mhz_d;   /* moe_sm_mhz's result (the warm-up: run 5's first reading came out 0, the race fixed) */
    CU(cudaMalloc((void **)&mhz_d, sizeof(float)));
    (void)sm_mhz_now(mhz_d, 0);
    const double ceiling = read_ceiling(big, nread, sink, e0, e1);
    printf("gpu %s, HBM read ceiling %.3f TB/s (8 GiB read)\n", prop.name, ceiling);
    nvml_t nv = {0};
    if (power_ms > 0 && nvml_open(&nv)) return 1;
    cudaStream_t st, side;   /* side: sm_mhz_during's probe, and --power's */
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    {   /* what a replay costs with no work in it */
        float *ftm = malloc((size_t)64 * NSETS * sizeof(float));
        graph_floor(st, e0, e1, ftm);
        free(ftm);
    }
    if (power_ms > 0) {   /* the read kernel's and the idle GPU's energy, then each row's */
        const power_work rd = {NULL, big, nread, sink, 0, 0, 0, 0};
        const power_row idle = power_run(&nv, &rd, 0, 1000, st, side, mhz_d), r = power_run(&nv, &rd, 1, power_ms, st, side, mhz_d);
        printf("  power idle: %.0f W over %.2f s\n", idle.watts, idle.s);
        power_print("read", &r, nread);
        /* the same read over random bytes, as the expert weights are: the ceiling's buffer holds one byte
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
    for (int i = 0; i < nset; i++)
        if (moe_plan_set(&W, sets[i])) return 2;
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
    {
    for (int i = 0; i < nset; i++) printf("plan: %s forced\n", sets[i]);
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
            if (row_cool_ms > 0) {   /* the GPU idle before the row, so it starts at the clock a cool GPU has */
                const struct timespec ts = {row_cool_ms / 1000, (long)(row_cool_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            /* the reading, then the same graphs with each replay queued behind the hold */
            const double ms = replay_ms(g, st, e0, e1, reps, tm, 0), tbs = bytes / (ms * 1e-3) / 1e12,
                         launch_us = g_launch_us;
            /* the SM clock the replays leave */
            const float mhz = sm_mhz_now(mhz_d, st);
            /* the clock during one more replay (a one-thread probe on a side stream over 80 % of the reading,
               launched just before it): under the power cap the clock after a reading has drained is not the one it
               ran at (`sluice-bench moe`) */
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
            if (power_ms > 0) {   /* the row's graphs back to back: power, energy per replay and per byte */
                const power_work pw = {g, NULL, 0, NULL, 0, 0, 0, 0};
                const power_row r = power_run(&nv, &pw, NSETS, power_ms, st, side, mhz_d);
                printf("  power %d %s: %d replays in %.2f s, %.4f ms each (%.3f TB/s), %.0f W, %.4f J per replay, %.1f pJ per "
                       "byte; SM %.0f MHz (NVML), %.0f (probe); window %.3f %.3f\n", T, routing, r.n, r.s, r.ms_per,
                       bytes / (r.ms_per * 1e-3) / 1e12, r.watts, r.j_per, r.j_per / bytes * 1e12, r.nvml_mhz, r.probe_mhz,
                       r.w0, r.w1);
            }
            if (sustain > 0) {   /* does sustained load slow the replays (the power cap)? each round's median
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
    }
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
        else if (!strcmp(argv[i], "--power") && i + 1 < argc) power_ms = atoi(argv[++i]);   /* */
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
    if (power_ms > 0) {   /* energy per byte of the read kernel and of the steady streams, by how they read */
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
    /* the same one-shot streams after a touch (moe_touch, one word per 64 KB) of another region of the same
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

int bench_decode(int argc, char **argv);   /* bench_decode.c */
int bench_ops(int argc, char **argv);      /* bench_ops.c */
int bench_engine(int argc, char **argv);   /* bench_engine.c */

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "moe")) return bench_moe(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "decode")) return bench_decode(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "stream")) return bench_stream(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "ops")) return bench_ops(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "engine")) return bench_engine(argc, argv);
    fprintf(stderr, "usage: sluice-bench moe [--out FILE] [--peer FILE] [--commit SHA] [--batches 1,4,...] [--reps N]\n"
                    "       sluice-bench decode [--synthetic SPEC] [--batches 1,4,16,64] [--contexts 8192,65536] [--reps N]\n"
                    "       sluice-bench stream [--out FILE] [--power MS]\n"
                    "       sluice-bench ops [--reps R]\n"
                    "       sluice-bench engine (--synthetic SPEC | --model DIR) [--batches 1,16,64] [--tokens T]\n");
    return argc >= 2 && !strcmp(argv[1], "--help") ? 0 : 2;
}
#endif

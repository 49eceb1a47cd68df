/* cpu.h — internals of the float32 reference backend (not a public interface).
 *
 * pool.c       a small persistent pthread pool: splits an index range [0,n) over the threads
 * ops.c        batched matmul over qtensors (dequantise a weight row once, dot it with every
 *              token of the step), rmsnorm, RoPE tables, softmax helpers
 * mhc.c        manifold hyper-connections: hc_pre (mixes, Sinkhorn), hc_post, hc_head
 * attention.c  q/kv LoRA, sliding ring, CSA/HCA compressors, lightning indexer, sinks, grouped wo
 * moe.c        router (sqrtsoftplus/softmax/sigmoid, hash), routed + shared SwiGLU experts
 * forward.c    the layer loop over a batch of spans, final head, the backend vtable
 *
 * Activations are row-major [n_tokens, width] float32 for all tokens of the step together.
 */
#ifndef SLUICE_CPU_H
#define SLUICE_CPU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

/* ---- thread pool */
typedef struct cpu_pool cpu_pool;
typedef void (*cpu_task_fn)(void *arg, int i0, int i1, int thread);
cpu_pool *cpu_pool_create(int n_threads);
void cpu_pool_destroy(cpu_pool *p);
int cpu_pool_threads(const cpu_pool *p);
/* Run fn over [0,n) split into one contiguous range per thread (the caller is thread 0). */
void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *arg, int n);
/* Per-thread scratch of at least `floats` floats (grown by cpu_pool_reserve, single-threaded). */
int cpu_pool_reserve(cpu_pool *p, size_t floats);
float *cpu_pool_scratch(cpu_pool *p, int thread);

/* ---- ops */
/* y[i*ldy + (r-row0)] = W[r,:] . x[i*ldx + 0..cols) for r in [row0,row0+nrows), i in [0,n). */
void cpu_matmul(cpu_pool *p, const qtensor *W, int row0, int nrows,
                const float *x, int ldx, int n, float *y, int ldy);
float cpu_dot(const float *a, const float *b, int n);
void cpu_round_bf16(float *x, size_t n);
/* out = w ⊙ x·rsqrt(mean(x²)+eps); w NULL = unweighted. out may alias x. */
void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* Wrap an owned float array as an F32 qtensor view. */
qtensor cpu_f32_view(const float *data, int rows, int cols);

/* RoPE on the trailing 2*half dims of x (interleaved pairs), cos/sin given per pair. */
void cpu_rope(float *x, int dim, const float *cs, const float *sn, int half, int inverse);
/* cos/sin tables for position pos from inverse frequencies (double precision angles). */
void cpu_rope_table(const double *inv_freq, int half, long pos, float *cs, float *sn);

static inline float cpu_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

/* ---- model-level context shared by the stages of one step */
typedef struct {
    const v4_weights *w;
    v4_state_pool *pool;
    cpu_pool *tp;
    double *freq_main, *freq_comp;   /* rope_dim/2 each */
    int bf16;                        /* gpu numerics (sl_backend_cpu_set_gpu_numerics) */
    int index_fp8;                   /* the indexer's keys kept as FP8 blocks (sl_backend_cpu_set_index_fp8) */
    int kv_fp8;                      /* window rows and compressed entries kept as FP8 KV (sl_backend_cpu_set_kv_fp8) */
    float *gap;                      /* NULL, or per step row the smallest top-k decision gap (sl_backend_cpu_log_decisions) */
    int gap_cap;
} cpu_model;

/* Record a top-k decision of row i: the last chosen and the first rejected candidate's scores. */
static inline void cpu_log_gap(const cpu_model *m, int i, float chosen, float rejected) {
    if (!m->gap || i >= m->gap_cap) return;
    float scale = fabsf(chosen) > 1e-12f ? fabsf(chosen) : 1e-12f, g = (chosen - rejected) / scale;
    if (g < m->gap[i]) m->gap[i] = g;
}

typedef struct {          /* one sequence's tokens inside the step's flat token array */
    v4_seq_state *st;
    int off, n;           /* rows [off, off+n) of the activations */
    int pos0;             /* position of its first token */
    const int32_t *tokens;
} cpu_span;

void cpu_matmul_dense(const cpu_model *m, const qtensor *W, int row0, int nrows, const float *x, int ldx, int n,
                      float *y, int ldy);
/* under gpu numerics: round x to bf16 in place (what the cuda backend stores or feeds a projection in bf16) */
static inline void cpu_gpu_round(const cpu_model *m, float *x, size_t n) {
    if (m->bf16) cpu_round_bf16(x, n);
}

/* mhc.c */
void cpu_hc_pre(cpu_model *m, const float *X, int n, const float *fn, const float *scale,
                const float *base, float *x, float *post, float *comb, float *mix_buf);
void cpu_hc_post(const cpu_model *m, float *X, const float *f, int n, const float *post, const float *comb);
void cpu_hc_head(cpu_model *m, const float *X, int n, float *y, float *mix_buf);

/* attention.c: f[n, dim] = Attention(xn) for layer l over all spans. */
typedef struct cpu_attn_buf cpu_attn_buf;
int cpu_attention(cpu_model *m, int l, const cpu_span *spans, int n_spans, int n,
                  const float *xn, float *f, cpu_attn_buf **buf);
void cpu_attn_buf_free(cpu_attn_buf *b);

/* moe.c: f[n, dim] = MoE(xn) for layer l; tok[i] = token id of row i. */
typedef struct cpu_moe_buf cpu_moe_buf;
int cpu_moe(cpu_model *m, int l, int n, const int32_t *tok, const float *xn, float *f, cpu_moe_buf **buf);
void cpu_moe_buf_free(cpu_moe_buf *b);

#endif

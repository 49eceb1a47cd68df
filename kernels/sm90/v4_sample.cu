/* v4_sample.cu — next-token selection on the GPU, engine/sampler.h's rules for one logits row per block, so a step
 * hands back token ids instead of vocab_size floats a row.
 *
 * Per row (1024 threads; thread t owns the ids [t*per, (t+1)*per), so every sum below is a fixed tree over fixed
 * ranges: a row's result never depends on the batch): the repetition penalty over the distinct history tokens (a
 * bitmap marks the first occurrence), the temperature, the argmax (lowest id on ties), lse = log-sum-exp in double;
 * greedy stops there. Otherwise p = softmax (float of the double quotient, into `probs`), then on the survivors:
 * top_k by an exact radix select on p's bits (ties -> lower id), top_p by the largest p* whose mass at or above it
 * reaches top_p of the total (bits found high to low) plus the lowest-id ties at p* that the mass still needs, min_p
 * against the argmax's p; survivors renormalised; u from the request's splitmix64 state; the first id, in id
 * order, whose cumulative mass exceeds u times the total (the thread whose range holds it walks it). Excluded
 * tokens get p = 0, which no walk can pick. Sums in double as the CPU sampler's; their order differs, so a draw
 * that falls within rounding of a boundary may differ from the CPU's (tests/gpu/test_v4_ops.c compares both).
 *
 * Rows that keep every token (no penalty, greedy or no top-k / top-p / min-p: plain temperature sampling, the common
 * case) take a wide path instead, since one block's passes over 129K logits are a latency of their own (hundreds of
 * us a step): k_sample_chunks splits the row into chunks of SMP_CHUNK ids over many blocks, each finding its chunk's
 * maximum (lowest id on ties) and its sum of exp(z - max) in double; k_sample_draw (a block a row) combines the chunks
 * in id order into the argmax and lse, and for a draw finds the chunk whose cumulative mass holds u times the total,
 * then the id inside it by a scan of that chunk alone. The same rules, the sums in another fixed order.
 */
#include <math.h>

#include "common/dev_flag.cuh"
#include "common/v4_dev.cuh"

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)

struct SmpShared {
    double dred[SMP_WARPS];
    float fval[SMP_WARPS];
    int ival[SMP_WARPS];
    unsigned hist[256];
    double tsum[SMP_THREADS];   /* per-thread partials for the ordered walks */
    int tcnt[SMP_THREADS];
};

/* The block's sum of v (a fixed tree: warp shuffles, then the warps in order); red: SMP_WARPS of shared memory. */
template <typename T>
__device__ T smp_sum(T v, T *red)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) red[w] = v;
    __syncthreads();
    T t = 0;
    for (int k = 0; k < SMP_WARPS; k++) t += red[k];
    __syncthreads();
    return t;
}

__device__ __forceinline__ uint64_t smp_splitmix(uint64_t s)
{
    uint64_t z = s + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Rows that keep every token (the file's header): no penalty, and greedy or no top-k / top-p / min-p; a vocabulary
 * of at least 4, whose probs scratch holds the chunk records. */
__device__ __forceinline__ bool smp_wide(const v4_sample_req &R, int V)
{
    const bool greedy = R.temperature < 1e-5f || R.top_k == 1;
    return V >= 4 && (R.repetition_penalty == 1.0f || R.n_hist <= 0) &&
           (greedy || (R.top_k <= 0 && R.top_p >= 1.0f && R.min_p <= 0.0f));
}

/* Exclusive prefix of every thread's tsum / tcnt (thread order = id order), in place. */
__device__ void smp_scan(SmpShared &s)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        double a = 0.0;
        int c = 0;
        for (int k = 0; k < SMP_THREADS; k++) {
            const double x = s.tsum[k];
            const int y = s.tcnt[k];
            s.tsum[k] = a;
            s.tcnt[k] = c;
            a += x;
            c += y;
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(SMP_THREADS) k_sample(float *logits, float *probs, int V, const v4_sample_req *req,
                                                        const int32_t *hist, uint32_t *marks, int32_t *token,
                                                        float *logprob)
{
    extern __shared__ __align__(16) uint8_t smp_raw[];
    SmpShared &s = *reinterpret_cast<SmpShared *>(smp_raw);
    const v4_sample_req R = req[blockIdx.x];
    if (smp_wide(R, V)) return;   /* k_sample_chunks and k_sample_draw take it */
    float *z = logits + (size_t)R.row * V, *p = probs + (size_t)blockIdx.x * V;
    const int tid = threadIdx.x, per = (V + SMP_THREADS - 1) / SMP_THREADS;
    const int i0 = min(V, tid * per), i1 = min(V, i0 + per);
    const bool greedy = R.temperature < 1e-5f || R.top_k == 1;

    if (R.repetition_penalty != 1.0f && R.n_hist > 0) {
        uint32_t *mk = marks + (size_t)blockIdx.x * ((V + 31) / 32);
        for (int k = tid; k < (V + 31) / 32; k += SMP_THREADS) mk[k] = 0u;
        __syncthreads();
        for (int j = tid; j < R.n_hist; j += SMP_THREADS) {
            const int t = hist[R.hist_off + j];
            if (t < 0 || t >= V) continue;
            const uint32_t bit = 1u << (t & 31);
            if (!(atomicOr(&mk[t >> 5], bit) & bit)) z[t] = z[t] > 0.0f ? z[t] / R.repetition_penalty : z[t] * R.repetition_penalty;
        }
        __syncthreads();
    }
    /* temperature; argmax (first maximum) */
    float bv = -INFINITY;
    int bi = V;
    for (int i = i0; i < i1; i++) {
        if (!greedy) z[i] = z[i] / R.temperature;
        if (z[i] > bv || bi == V) { bv = z[i]; bi = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if ((tid & 31) == 0) { s.fval[tid >> 5] = bv; s.ival[tid >> 5] = bi; }
    __syncthreads();
    bv = s.fval[0];
    bi = s.ival[0];
    for (int k = 1; k < SMP_WARPS; k++)
        if (s.fval[k] > bv || (s.fval[k] == bv && s.ival[k] < bi)) { bv = s.fval[k]; bi = s.ival[k]; }
    __syncthreads();
    const double zmax = bv;
    double part = 0.0;
    for (int i = i0; i < i1; i++) part += exp((double)z[i] - zmax);
    const double sum = smp_sum(part, s.dred), lse = zmax + log(sum);
    if (greedy) {
        if (tid == 0) { token[blockIdx.x] = bi; logprob[blockIdx.x] = (float)((double)z[bi] - lse); }
        return;
    }
    for (int i = i0; i < i1; i++) p[i] = (float)(exp((double)z[i] - zmax) / sum);
    __syncthreads();
    const float pmax = p[bi];

    if (R.top_k > 0 && R.top_k < V) {   /* radix select of the k-th largest p (bits of p >= 0 order as p) */
        unsigned prefix = 0, mask = 0;
        int rem = R.top_k;
        for (int pass = 0; pass < 4; pass++) {
            const int shift = 24 - 8 * pass;
            for (int b = tid; b < 256; b += SMP_THREADS) s.hist[b] = 0;
            __syncthreads();
            for (int i = i0; i < i1; i++) {
                const unsigned key = __float_as_uint(p[i]);
                if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & 255u], 1u);
            }
            __syncthreads();
            int cum = 0, b = 255;
            for (; b > 0; b--) {
                if (cum + (int)s.hist[b] >= rem) break;
                cum += (int)s.hist[b];
            }
            rem -= cum;
            prefix |= (unsigned)b << shift;
            mask |= 255u << shift;
            __syncthreads();
        }
        /* keep p > T and the lowest-id `rem` of p == T */
        int eq = 0;
        for (int i = i0; i < i1; i++) eq += __float_as_uint(p[i]) == prefix;
        s.tcnt[tid] = eq;
        s.tsum[tid] = 0.0;
        smp_scan(s);
        int before = s.tcnt[tid];
        for (int i = i0; i < i1; i++) {
            const unsigned key = __float_as_uint(p[i]);
            if (key < prefix || (key == prefix && before++ >= rem)) p[i] = 0.0f;
        }
        __syncthreads();
    }
    if (R.top_p < 1.0f) {
        double m = 0.0;
        for (int i = i0; i < i1; i++) m += p[i];
        const double target = R.top_p * smp_sum(m, s.dred);
        unsigned v = 0;   /* the largest p* with mass(p >= p*) >= target, bit by bit */
        for (int bit = 30; bit >= 0; bit--) {
            const unsigned cand = v | (1u << bit);
            double a = 0.0;
            for (int i = i0; i < i1; i++)
                if (__float_as_uint(p[i]) >= cand) a += p[i];
            if (smp_sum(a, s.dred) >= target) v = cand;
        }
        const float ps = __uint_as_float(v);
        double gt = 0.0;
        int eq = 0;
        for (int i = i0; i < i1; i++) {
            if (p[i] > ps) gt += p[i];
            eq += p[i] == ps;
        }
        const double m_gt = smp_sum(gt, s.dred);
        const int n_eq = smp_sum(eq, s.ival);
        /* ties at p* in id order until the mass reaches the target (at least one) */
        int need = ps > 0.0f ? (int)ceil((target - m_gt) / (double)ps) : n_eq;
        need = need < 1 ? 1 : (need > n_eq ? n_eq : need);
        s.tcnt[tid] = eq;
        s.tsum[tid] = 0.0;
        smp_scan(s);
        int before = s.tcnt[tid];
        for (int i = i0; i < i1; i++)
            if (p[i] < ps || (p[i] == ps && before++ >= need)) p[i] = 0.0f;
        __syncthreads();
    }
    if (R.min_p > 0.0f) {
        const float thr = R.min_p * pmax;
        for (int i = i0; i < i1; i++)
            if (p[i] < thr) p[i] = 0.0f;
        __syncthreads();
    }
    /* renormalise, then draw in id order */
    double t1 = 0.0;
    for (int i = i0; i < i1; i++) t1 += p[i];
    const double tot = smp_sum(t1, s.dred);
    double t2 = 0.0;
    int last = -1;
    for (int i = i0; i < i1; i++) {
        p[i] = (float)(p[i] / tot);
        t2 += p[i];
        if (p[i] > 0.0f) last = i;
    }
    s.tsum[tid] = t2;
    s.tcnt[tid] = last;
    __syncthreads();
    int last_all = -1;
    if (tid == 0)
        for (int k = 0; k < SMP_THREADS; k++) last_all = s.tcnt[k] >= 0 ? s.tcnt[k] : last_all;
    __syncthreads();
    if (tid == 0) s.ival[0] = last_all;
    s.tcnt[tid] = 0;
    smp_scan(s);
    const double all = s.tsum[SMP_THREADS - 1] + t2;   /* the last thread's exclusive prefix + its own sum */
    __shared__ double total;
    if (tid == SMP_THREADS - 1) total = all;
    __shared__ int chosen;
    if (tid == 0) chosen = -1;
    __syncthreads();
    const double u = (double)(smp_splitmix(R.rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    double cum = s.tsum[tid];
    if (u < cum + t2 && u >= cum)
        for (int i = i0; i < i1; i++) {
            if (p[i] <= 0.0f) continue;
            cum += p[i];
            if (u < cum) { chosen = i; break; }
        }
    __syncthreads();
    if (tid == 0) {
        const int tok = chosen >= 0 ? chosen : s.ival[0];
        token[blockIdx.x] = tok;
        logprob[blockIdx.x] = (float)((double)z[tok] - lse);
    }
}

/* ---- the wide path for rows that keep every token */
#define SMP_CHUNK 2048        /* ids a chunk */
#define SMPW_THREADS 256      /* each thread SMP_CHUNK / SMPW_THREADS consecutive ids in the draw's scan */
#define SMPW_PER (SMP_CHUNK / SMPW_THREADS)

struct SmpChunk {             /* one chunk of one row (in the row's probs scratch) */
    double sum;               /* sum of exp(z - max) over the chunk */
    float max;
    int arg;                  /* the lowest id holding max */
};

/* The processed logit of id i: the temperature applied as k_sample applies it. */
__device__ __forceinline__ float smp_z(const float *z, int i, const v4_sample_req &R, bool greedy)
{
    return greedy ? z[i] : z[i] / R.temperature;
}

/* (max, lowest id) over the block; red: SMPW_THREADS / 32 of each */
__device__ void smp_block_argmax(float &bv, int &bi, float *rv, int *ri)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if ((threadIdx.x & 31) == 0) { rv[threadIdx.x >> 5] = bv; ri[threadIdx.x >> 5] = bi; }
    __syncthreads();
    bv = rv[0];
    bi = ri[0];
    for (int k = 1; k < SMPW_THREADS / 32; k++)
        if (rv[k] > bv || (rv[k] == bv && ri[k] < bi)) { bv = rv[k]; bi = ri[k]; }
    __syncthreads();
}

/* The block's sum of v in a fixed order; red: SMPW_THREADS / 32 doubles. */
__device__ double smp_block_dsum(double v, double *red)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    for (int k = 0; k < SMPW_THREADS / 32; k++) t += red[k];
    __syncthreads();
    return t;
}

/* Row r's chunk records: nc of them at the start of probs, row after row (m nc x 16 bytes <= m V floats for V >= 4).
 * They may lie in a block-a-row row's stretch of probs: k_sample runs after k_sample_draw has read them. */
__device__ __forceinline__ SmpChunk *smp_chunks(float *probs, int r, int nc)
{
    return reinterpret_cast<SmpChunk *>(probs) + (size_t)r * nc;
}

__global__ void __launch_bounds__(SMPW_THREADS) k_sample_chunks(const float *logits, float *probs, int V,
                                                                const v4_sample_req *req)
{
    __shared__ float rv[SMPW_THREADS / 32];
    __shared__ int ri[SMPW_THREADS / 32];
    __shared__ double rd[SMPW_THREADS / 32];
    const v4_sample_req R = req[blockIdx.y];
    if (!smp_wide(R, V)) return;
    const bool greedy = R.temperature < 1e-5f || R.top_k == 1;
    const float *z = logits + (size_t)R.row * V;
    const int c0 = blockIdx.x * SMP_CHUNK, c1 = min(V, c0 + SMP_CHUNK);
    float bv = -INFINITY;
    int bi = V;
    for (int i = c0 + threadIdx.x; i < c1; i += SMPW_THREADS) {
        const float v = smp_z(z, i, R, greedy);
        if (v > bv || bi == V) { bv = v; bi = i; }
    }
    smp_block_argmax(bv, bi, rv, ri);
    double part = 0.0;   /* a chunk of -inf logits has no mass (its max would make exp(-inf + inf) NaN) */
    if (bv != -INFINITY)
        for (int i = c0 + threadIdx.x; i < c1; i += SMPW_THREADS) part += exp((double)smp_z(z, i, R, greedy) - (double)bv);
    const double sum = smp_block_dsum(part, rd);
    if (threadIdx.x == 0) smp_chunks(probs, blockIdx.y, gridDim.x)[blockIdx.x] = SmpChunk{sum, bv, bi};
}

__global__ void __launch_bounds__(SMPW_THREADS) k_sample_draw(const float *logits, const float *probs, int V,
                                                              const v4_sample_req *req, int32_t *token,
                                                              float *logprob)
{
    __shared__ double wsum[SMPW_THREADS / 32];
    __shared__ int pick_chunk, chosen;
    __shared__ double pick_u, zmax_s, lse_s;
    __shared__ int arg_s;
    const v4_sample_req R = req[blockIdx.x];
    if (!smp_wide(R, V)) return;
    const bool greedy = R.temperature < 1e-5f || R.top_k == 1;
    const float *z = logits + (size_t)R.row * V;
    const int nc = (V + SMP_CHUNK - 1) / SMP_CHUNK;
    const SmpChunk *ck = smp_chunks(const_cast<float *>(probs), blockIdx.x, nc);
    if (threadIdx.x == 0) {   /* the chunks in id order: the argmax (first maximum), the sum, the draw's chunk */
        float bv = ck[0].max;
        int bi = ck[0].arg;
        for (int c = 1; c < nc; c++)
            if (ck[c].max > bv) { bv = ck[c].max; bi = ck[c].arg; }
        const double zmax = bv;
        double sum = 0.0;
        for (int c = 0; c < nc; c++) sum += ck[c].sum * exp((double)ck[c].max - zmax);
        zmax_s = zmax;
        lse_s = zmax + log(sum);
        arg_s = bi;
        chosen = -1;
        pick_chunk = -1;
        if (!greedy) {
            const double u = (double)(smp_splitmix(R.rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
            double cum = 0.0;
            int last = -1;
            for (int c = 0; c < nc && pick_chunk < 0; c++) {
                const double mass = ck[c].sum * exp((double)ck[c].max - zmax);
                if (mass > 0.0) last = c;
                if (u < cum + mass) { pick_chunk = c; pick_u = u - cum; }
                cum += mass;
            }
            if (pick_chunk < 0) { pick_chunk = last; pick_u = INFINITY; }   /* u past the rounded total: the last id */
        }
    }
    __syncthreads();
    if (!greedy && pick_chunk >= 0) {   /* the id inside the chunk: each thread SMPW_PER consecutive ids in order */
        const int i0 = pick_chunk * SMP_CHUNK + threadIdx.x * SMPW_PER, i1 = min(V, i0 + SMPW_PER);
        const double zmax = zmax_s;
        double t = 0.0;
        for (int i = i0; i < i1; i++) t += exp((double)smp_z(z, i, R, false) - zmax);
        const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
        double x = t;   /* inclusive scan in the warp, then the warps' totals in order */
        for (int o = 1; o < 32; o <<= 1) {
            const double y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        if (lane == 31) wsum[w] = x;
        __syncthreads();
        if (threadIdx.x == 0) {
            double a = 0.0;
            for (int k = 0; k < SMPW_THREADS / 32; k++) {
                const double v = wsum[k];
                wsum[k] = a;
                a += v;
            }
        }
        __syncthreads();
        /* the mass before this thread's ids: exactly the value the thread before computes as the mass through its
         * own, so the threads' ranges partition the chunk's without a gap or an overlap */
        const double prev = __shfl_up_sync(0xffffffffu, x, 1);
        const double incl = wsum[w] + x;
        double cum = lane ? wsum[w] + prev : wsum[w];
        const double u = pick_u;
        if (u >= cum && u < incl)
            for (int i = i0; i < i1; i++) {
                cum += exp((double)smp_z(z, i, R, false) - zmax);
                if (u < cum) { chosen = i; break; }
            }
        __syncthreads();
        if (threadIdx.x == 0 && chosen < 0) {   /* past the chunk's rounded total: its last id with mass */
            for (int i = min(V, (pick_chunk + 1) * SMP_CHUNK) - 1; i >= pick_chunk * SMP_CHUNK && chosen < 0; i--)
                if (exp((double)smp_z(z, i, R, false) - zmax) > 0.0) chosen = i;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const int tok = greedy || chosen < 0 ? arg_s : chosen;   /* no mass anywhere (NaN logits): the argmax */
        token[blockIdx.x] = tok;
        logprob[blockIdx.x] = (float)((double)smp_z(z, tok, R, greedy) - lse_s);
    }
}

extern "C" cudaError_t v4_sample(float *logits, int m, int V, const v4_sample_req *req, const int32_t *hist,
                                 float *probs, uint32_t *marks, int32_t *token, float *logprob, cudaStream_t st)
{
    if (m <= 0) return cudaSuccess;
    k_sample_chunks<<<dim3((V + SMP_CHUNK - 1) / SMP_CHUNK, m), SMPW_THREADS, 0, st>>>(logits, probs, V, req);
    k_sample_draw<<<m, SMPW_THREADS, 0, st>>>(logits, probs, V, req, token, logprob);
    static unsigned char attr_sets[DEV_FLAG_MAX];   /* per device: the limit is the current device's */
    unsigned char *attr_set = dev_flag(attr_sets);
    if (!attr_set || !*attr_set) {
        cudaError_t e = cudaFuncSetAttribute(k_sample, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(SmpShared));
        if (e != cudaSuccess) return e;
        if (attr_set) *attr_set = 1;
    }
    k_sample<<<m, SMP_THREADS, sizeof(SmpShared), st>>>(logits, probs, V, req, hist, marks, token, logprob);
    return cudaGetLastError();
}

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

extern "C" cudaError_t v4_sample(float *logits, int m, int V, const v4_sample_req *req, const int32_t *hist,
                                 float *probs, uint32_t *marks, int32_t *token, float *logprob, cudaStream_t st)
{
    if (m <= 0) return cudaSuccess;
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

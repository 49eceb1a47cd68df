/* moe_shared_gemm.cuh — the shared expert at large batches as two bf16 GEMMs (v36, SG: moe_cuda_ws.shared_gemm_min_t;
 * moe_shared_gemms; included by moe_expert.cu, whose stage trace and carveout it shares).
 *
 * Why: from ~128 tokens the shared expert is a dense GEMM (T x 4096 x 4096, then T x 2048 x 4096), and k_shared_fp8
 * re-dequantises every FP8 weight once per 16-64-token block (bench/NOTES.md v36 (1): without the shared expert the
 * layer is ~110 us shorter at 512, for 25 MB of weights, ~5 us of HBM time). Here the weights are dequantised once, at
 * load time, into a bf16 copy (moe_shared_to_bf16; moe_cuda_shape.shared_bf16), so a block's inner loop is ldmatrix +
 * mma.sync only; the price is 2x the shared expert's bytes (50 MB against 25; the JSON's bytes keep the FP8 floor).
 * FOLD 1 (power-of-two block scales, DeepSeek's ue8m0: moe_cuda_layer.sh_pow2): the scales are folded into the bf16
 * weights, exact. FOLD 0: the weights are the e4m3 values (exact) and the fp32 block scale multiplies each 128-input
 * block's fp32 partial sums, k_shared_fp8's numerics (a fold of other scales gave the shared expert alone 6.5e-3
 * relative L2 against k_shared_fp8's 9.5e-4: NOTES v36 (2)). Measured (NOTES v36 (2)-(4)): alone on the GPU the gate/up
 * takes 72 us at 512 (FOLD 1; 82 with the partials) and the down 32-37, against k_shared_fp8's 107 and 69; bound by the
 * L2 -> SM traffic of 128 x 128 tiles (~3.3 TB/s), not by the tensor pipe; the layer gains 2-3 % at 512 (skewed 512
 * 7 %) and nothing at 128-256, so moe_cuda_ws uses it from 512.
 *
 * C[t][n] = sum_k A[t][k] B[n][k]: A the token rows (x for gate/up; the shared pairs' h rows for down), B the weights
 * ([n][k], k contiguous, "TN"). Block tile 128 tokens x 128 outputs, K in steps of 64; 8 warps as 2 (tokens) x 4
 * (outputs), each warp 64 x 32 (4 m16 x 4 n8 accumulators). Both tiles go global -> shared memory by 16-byte cp.async,
 * GM_STAGES - 1 steps in flight, rows of 128 bytes with the 16-byte chunk index XOR (row & 7) so ldmatrix reads are
 * conflict-free. Gate/up: B's rows interleave w1 and w3 (row 2i gate i, 2i + 1 up i), so each lane's accumulator pair
 * (c0, c1) is (gate, up) of one (token, i): swiglu in registers, h as bf16. Down: y rows (fp32) as float2 stores. Token
 * rows past T are read as row T - 1 and never stored. Deterministic: one owner per output, a fixed K order.
 */
#ifndef SLUICE_MOE_SHARED_GEMM_CUH
#define SLUICE_MOE_SHARED_GEMM_CUH

#define GM_BM 128
#define GM_BN 128
#define GM_BK 64
#ifndef GM_STAGES
#define GM_STAGES 4
#endif
#define GM_STAGE_BYTES ((GM_BM + GM_BN) * GM_BK * 2)

__device__ __forceinline__ void gm_ldsm_x4(uint32_t r[4], const uint16_t *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* element offset of (row, 16-byte chunk c) in a [rows][64] bf16 tile */
__device__ __forceinline__ int gm_swz(int row, int c) { return row * GM_BK + ((c ^ (row & 7)) << 3); }

/* GU 1: gate/up (A = xin rows 0..T-1 of K = H inputs, B = b13 [2I][H], -> h rows T*topk + t);
 * GU 0: down (A = h rows T*topk + t of K = I, B = b2 [H][I], -> y rows T*topk + t).
 * grid: (token tiles, N / GM_BN): the blocks of one weight tile are adjacent, so its bytes come from HBM once. */
/* sc (FOLD 0): the fp32 block scales (gate/up: sh_s13, w3's at + (I / 128) (H / 128); down: sh_s2) */
template <int GU, int FOLD>
__global__ void __launch_bounds__(256, 1) k_shared_gemm(const uint16_t *wb, const float *sc, int H, int I, float limit,
                                                        const uint16_t *xin, int T, int topk, uint16_t *h, float *y)
{
    const MoeTrace trace_(GU ? MOE_TR_SH_GU : MOE_TR_SH_DN);
    extern __shared__ __align__(16) uint8_t smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int wm = warp & 1, wn = warp >> 1;
    const int K = GU ? H : I, nk = K / GM_BK;
    const int m0 = blockIdx.x * GM_BM, n0 = blockIdx.y * GM_BN;
    const size_t base = GU ? 0 : (size_t)T * topk;   /* down reads the shared pairs' h rows */
    const uint16_t *B = wb + (size_t)n0 * K;
    auto As = [&](int s) { return (uint16_t *)(smem + (size_t)s * GM_STAGE_BYTES); };
    auto Bs = [&](int s) { return (uint16_t *)(smem + (size_t)s * GM_STAGE_BYTES + GM_BM * GM_BK * 2); };
    /* 1024 16-byte chunks per tile, 4 per thread: row = id / 8, chunk = id % 8 */
    auto load_b = [&](int s, int kt) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int id = tid + i * 256, row = id >> 3, c = id & 7;
            cp16((uint8_t *)(Bs(s) + gm_swz(row, c)), B + (size_t)row * K + kt * GM_BK + c * 8);
        }
    };
    auto load_a = [&](int s, int kt) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int id = tid + i * 256, row = id >> 3, c = id & 7;
            const size_t t = base + (size_t)min(m0 + row, T - 1);
            cp16((uint8_t *)(As(s) + gm_swz(row, c)), xin + t * K + kt * GM_BK + c * 8);
        }
    };
    /* the weights do not depend on the previous kernel: their first steps go out before the wait; group s then
       holds B 0..GM_STAGES-2 (s = 0) and A s, so waiting for group s has both tiles of step s */
#pragma unroll
    for (int s = 0; s < GM_STAGES - 1; s++)
        if (s < nk) load_b(s, s);
    moe_pdl_wait();
    if (!GU) moe_pdl_release();
#pragma unroll
    for (int s = 0; s < GM_STAGES - 1; s++) {
        if (s < nk) load_a(s, s);
        cp_commit();
    }
    /* this tile's scale row: gate/up rows n0 / 2 .. + 63 of w1 and w3 (one 128-row block), down rows n0 .. + 127 */
    const int nkb = K / 128;
    const float *s_a = sc + (size_t)(GU ? n0 / 256 : n0 / 128) * nkb,
                *s_b = GU ? s_a + (size_t)(I / 128) * (H / 128) : s_a;   /* odd columns: up (w3) */
    float acc[4][4][4], part[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = part[i][j][e] = 0.f;
    for (int kt = 0; kt < nk; kt++) {
        cp_wait<GM_STAGES - 2>();
        __syncthreads();   /* step kt has landed for every thread; every warp is done with step kt - 1's slot */
        {
            const int kn = kt + GM_STAGES - 1, sn = kn % GM_STAGES;
            if (kn < nk) {
                load_b(sn, kn);
                load_a(sn, kn);
            }
            cp_commit();
        }
        const uint16_t *as = As(kt % GM_STAGES), *bs = Bs(kt % GM_STAGES);
#pragma unroll
        for (int kk = 0; kk < GM_BK / 16; kk++) {
            uint32_t af[4][4], bf[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
                gm_ldsm_x4(af[mi], as + gm_swz(wm * 64 + mi * 16 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
            for (int p = 0; p < 2; p++) {
                uint32_t r[4];
                const int n = wn * 32 + p * 16 + (lane & 7) + ((lane >> 4) << 3);
                gm_ldsm_x4(r, bs + gm_swz(n, kk * 2 + ((lane >> 3) & 1)));
                bf[2 * p][0] = r[0], bf[2 * p][1] = r[1], bf[2 * p + 1][0] = r[2], bf[2 * p + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int nj = 0; nj < 4; nj++)
                    moe_mma_bf16(FOLD ? acc[mi][nj] : part[mi][nj], af[mi][0], af[mi][1], af[mi][2], af[mi][3],
                                 bf[nj][0], bf[nj][1]);
        }
        if (!FOLD && (kt & 1)) {   /* end of 128-input block kt / 2: acc += part * scale (c0, c2: even columns) */
            const float fa = __ldg(s_a + kt / 2), fb = __ldg(s_b + kt / 2);
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int nj = 0; nj < 4; nj++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        acc[mi][nj][e] = fmaf(part[mi][nj][e], e & 1 ? fb : fa, acc[mi][nj][e]);
                        part[mi][nj][e] = 0.f;
                    }
        }
    }
    cp_wait<0>();
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int t = m0 + wm * 64 + mi * 16 + g + half * 8;
            if (t >= T) continue;
#pragma unroll
            for (int nj = 0; nj < 4; nj++) {
                const int n = n0 + wn * 32 + nj * 8 + 2 * q;
                const float c0 = acc[mi][nj][2 * half], c1 = acc[mi][nj][2 * half + 1];
                if (GU)
                    h[((size_t)T * topk + t) * I + n / 2] = moe_f32_to_bf16(moe_swiglu(c0, c1, limit));
                else
                    *(float2 *)(y + ((size_t)T * topk + t) * H + n) = make_float2(c0, c1);
            }
        }
    if (GU) moe_pdl_release();
}

template <int GU, int FOLD>
static cudaError_t shared_gemm_launch(const moe_expert_args *a, const uint16_t *wb, const uint16_t *x, int T, int topk,
                                      uint16_t *h, float *y, cudaStream_t st)
{
    static int raised;
    const size_t sm = (size_t)GM_STAGES * GM_STAGE_BYTES;
    if (!raised) {
        const cudaError_t e = raise_smem((const void *)k_shared_gemm<GU, FOLD>, sm);
        if (e != cudaSuccess) return e;
        raised = 1;
    }
    const int n = GU ? 2 * a->I : a->H;
    return moe_launch_prio(k_shared_gemm<GU, FOLD>, dim3((T + GM_BM - 1) / GM_BM, n / GM_BN), dim3(256), sm, st,
                           a->sh_prio_on ? &a->sh_prio : (const int *)0, wb, GU ? a->sh_s13 : a->sh_s2, a->H, a->I,
                           a->limit, x, T, topk, h, y);
}

/* the shared expert's gate/up then down, into moe_shared_experts' rows (h and y after the T * topk routed pairs) */
extern "C" cudaError_t moe_shared_gemms(const moe_expert_args *a, const uint16_t *b13, const uint16_t *b2, int fold,
                                        const uint16_t *x, int T, int topk, uint16_t *h, float *y, cudaStream_t st)
{
    /* H, I multiples of the 128-row scale blocks: then 2I and H are whole GM_BN tiles and K whole GM_BK steps */
    if (!b13 || !b2 || T < 1 || a->H % 128 || a->I % 128) return cudaErrorInvalidValue;
    const cudaError_t e = fold ? shared_gemm_launch<1, 1>(a, b13, x, T, topk, h, y, st)
                               : shared_gemm_launch<1, 0>(a, b13, x, T, topk, h, y, st);
    if (e != cudaSuccess) return e;
    return fold ? shared_gemm_launch<0, 1>(a, b2, h, T, topk, h, y, st)
                : shared_gemm_launch<0, 0>(a, b2, h, T, topk, h, y, st);
}

#endif

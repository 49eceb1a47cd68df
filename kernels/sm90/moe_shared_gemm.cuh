/* moe_shared_gemm.cuh — the shared expert at large batches as two bf16 GEMMs (SG: moe_plan.shared_gemm;
 * moe_shared_gemms; included by moe_expert.cu, whose stage trace and carveout it shares).
 *
 * Why: from ~128 tokens the shared expert is a dense GEMM (T x 4096 x 4096, then T x 2048 x 4096), and k_shared_fp8
 * re-dequantises every FP8 weight once per 16-64-token block (`sluice-bench moe`: without the shared expert the
 * layer is ~110 us shorter at 512, for 25 MB of weights, ~5 us of HBM time). Here the weights are dequantised once, at
 * load time, into a bf16 copy (moe_shared_to_bf16; moe_cuda_shape.shared_bf16), so a block's inner loop is ldmatrix +
 * mma.sync only; the price is 2x the shared expert's bytes (50 MB against 25; the JSON's bytes keep the FP8 floor).
 * FOLD 1 (power-of-two block scales, DeepSeek's ue8m0: moe_cuda_layer.sh_pow2): the scales are folded into the bf16
 * weights, exact. FOLD 0: the weights are the e4m3 values (exact) and the fp32 block scale multiplies each 128-input
 * block's fp32 partial sums, k_shared_fp8's numerics (a fold of other scales gave the shared expert alone 6.5e-3
 * relative L2 against k_shared_fp8's 9.5e-4: `sluice-bench moe`). Measured (`sluice-bench moe`): alone on the GPU the gate/up
 * takes 72 us at 512 (FOLD 1; 82 with the partials) and the down 32-37, against k_shared_fp8's 107 and 69; bound by the
 * L2 -> SM traffic of 128 x 128 tiles (~3.3 TB/s), not by the tensor pipe; the layer gains 2-3 % at 512 (skewed 512
 * 7 %) and nothing at 128-256, so used it from 512.
 * (GWT, folded scales on sm_90a): the same GEMMs on wgmma with 128 x 256 tiles moved by TMA from a producer warp
 * (k_shared_gemm_tma, below); with it the plan runs them from 256 (`sluice-bench moe`: alone the gate/up at 512 53 us
 * against 71).
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

#include <cudaTypedefs.h>   /* CUtensorMap, PFN_cuTensorMapEncodeTiled (GWT) */

#define GM_BM 128
#define GM_BN 128
#define GM_BK 64
#define GM_STAGES 4   /* pipeline stages of the shared-memory ring */
#define GM_STAGE_BYTES ((GM_BM + GM_BN) * GM_BK * 2)

__device__ __forceinline__ void gm_ldsm_x4(uint32_t r[4], const uint16_t *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* element offset of (row, 16-byte chunk c) in a [rows][64] bf16 tile */
__device__ __forceinline__ int gm_swz(int row, int c) { return row * GM_BK + ((c ^ (row & 7)) << 3); }

/* output (t, n) and (t, n + 1) of a GEMM: gate/up the pair's swiglu as h (bf16), down two y floats (both GEMMs') */
template <int GU>
__device__ __forceinline__ void gm_store(float c0, float c1, int t, int n, int H, int I, float limit, int T, int topk,
                                         uint16_t *h, float *y)
{
    if (GU)
        h[((size_t)T * topk + t) * I + n / 2] = moe_f32_to_bf16(moe_swiglu(c0, c1, limit));
    else
        *(float2 *)(y + ((size_t)T * topk + t) * H + n) = make_float2(c0, c1);
}

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
            cp_async16((uint8_t *)(Bs(s) + gm_swz(row, c)), B + (size_t)row * K + kt * GM_BK + c * 8);
        }
    };
    auto load_a = [&](int s, int kt) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int id = tid + i * 256, row = id >> 3, c = id & 7;
            const size_t t = base + (size_t)min(m0 + row, T - 1);
            cp_async16((uint8_t *)(As(s) + gm_swz(row, c)), xin + t * K + kt * GM_BK + c * 8);
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
        cp_async_commit();
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
        cp_async_wait<GM_STAGES - 2>();
        __syncthreads();   /* step kt has landed for every thread; every warp is done with step kt - 1's slot */
        {
            const int kn = kt + GM_STAGES - 1, sn = kn % GM_STAGES;
            if (kn < nk) {
                load_b(sn, kn);
                load_a(sn, kn);
            }
            cp_async_commit();
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
                    mma_bf16(FOLD ? acc[mi][nj] : part[mi][nj], af[mi][0], af[mi][1], af[mi][2], af[mi][3],
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
    cp_async_wait<0>();
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
                gm_store<GU>(c0, c1, t, n, H, I, limit, T, topk, h, y);
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

/* ---- GW: the same two GEMMs on wgmma, for folded scales (the layout and helpers k_shared_gemm_tma uses).
 * Why: at 128 x 128 tiles on mma.sync each block re-reads its token rows and weight rows from L2 once per 128 of the
 * other side and keeps its warps issuing ldmatrix + mma.sync (L2-bound, the gate/up 72 us at 512 on every
 * SM). Here a block is 128 tokens x 256 outputs (25 % fewer L2 bytes per FLOP) and its two warpgroups each issue one
 * wgmma m64n128k16 per 128 outputs and 16 inputs, both operands straight from shared memory: the tensor work leaves
 * the warps' issue slots, and 64 blocks (one per SM) do 512 tokens' gate/up, so the router keeps the other SMs.
 * Layout: each stage holds A (128 token rows) then B (256 weight rows), rows of 64 bf16 (128 bytes) with the 16-byte
 * chunk index XOR (row & 7): wgmma's 128-byte swizzle, K-major, 8-row atoms 1024 bytes apart (the stage base is
 * 1024-aligned). FOLD 1 only (the partials form would need 128 more registers); numerics as k_shared_gemm<., 1>:
 * exact bf16 products, fp32 accumulation in a fixed order, one owner per output: deterministic. sm_90a only (sw_ok). */
#define GW_BM 128
#define GW_BN 256
#define GW_STAGES 4   /* pipeline stages of the shared-memory ring */
#define GW_A_BYTES (GW_BM * GM_BK * 2)
#define GW_STAGE_BYTES ((GW_BM + GW_BN) * GM_BK * 2)

/* shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart */
__device__ __forceinline__ uint64_t gw_desc(const uint8_t *p) { return wg_desc(smem_u32(p), 16, 1024); }

/* d += A (64 token rows, desc da) x B (256 weight rows, desc db: 8-row groups 1024 bytes apart)^T over 16 inputs:
 * both operands K-major in shared memory, 128-byte swizzle; d is wgmma's m64n256 f32 fragment (d[4j + i]: row
 * 16 (warp % 4) + g + 8 (i >> 1), column 8j + 2q + (i & 1)) */
__device__ __forceinline__ void gw_mma256(float *d, uint64_t da, uint64_t db) { wg_m64n256k16_ss<0>(d, da, db, 1); }

/* a lane's outputs of the 128 x 256 tile (m0, n0) from its warpgroup wg's m64n256 fragment acc (its 128-column halves):
 * token rows 64 wg + 16 warp + g (+ 8), columns 8j + 2q (+ 1); rows past T are not stored */
template <int GU>
__device__ __forceinline__ void gw_epilogue(const float (&acc)[2][64], int m0, int n0, int wg, int warp, int g, int q,
                                            int H, int I, float limit, int T, int topk, uint16_t *h, float *y)
{
#pragma unroll
    for (int hb = 0; hb < 2; hb++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int t = m0 + wg * 64 + warp * 16 + g + half * 8;
            if (t >= T) continue;
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int n = n0 + hb * 128 + j * 8 + 2 * q;
                const float c0 = acc[hb][4 * j + 2 * half], c1 = acc[hb][4 * j + 2 * half + 1];
                gm_store<GU>(c0, c1, t, n, H, I, limit, T, topk, h, y);
            }
        }
}

/* ---- GWT (moe_shared_gemms' wg 4): GW's tiles fed by the tensor memory accelerator.
 * Why: with 16-byte cp.async copies by every thread (`sluice-bench moe`, ncu of the gate/up alone at 512) a step
 * was 295 warp-instructions per warp, issued at one per ~7 cycles, so the copies and their address arithmetic took
 * the whole step, whatever the wgmma form. Here one lane of a ninth warp (the producer) moves each step's two tiles with two cp.async.bulk.tensor copies (A:
 * 128 token rows, B: 256 weight rows, 64 inputs each) into the same 128-byte-swizzled stage layout, completing on the
 * stage's "full" mbarrier; the two consumer warpgroups wait on it, issue one m64n256k16 per 16 inputs, keep one group in
 * flight, and arrive on the previous step's "empty" mbarrier, which the producer waits on before refilling that stage.
 * GW_STAGES steps in flight, no block barrier in the loop. Token rows past T are the tensor map's out-of-bounds rows
 * (zeros), never stored. Numerics as GW above: deterministic. The tensor maps (gwt_map)
 * are encoded on the host per launch (x, T and h's shared rows change with the batch). */
__device__ __forceinline__ uint32_t gwt_sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void gwt_mb_init(uint64_t *b, int n)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(gwt_sa(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void gwt_mb_expect(uint64_t *b, int bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(gwt_sa(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void gwt_mb_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(gwt_sa(b)) : "memory");
}
/* until the phase of parity par has completed */
__device__ __forceinline__ void gwt_mb_wait(uint64_t *b, int par)
{
    asm volatile("{\n.reg .pred p;\nGWT_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra GWT_WAIT;\n}" ::"r"(gwt_sa(b)), "r"(par) : "memory");
}
/* the box at (inner c0, row c1) of tensor map m into shared memory dst, completing on mbarrier b */
__device__ __forceinline__ void gwt_tma(void *dst, const CUtensorMap *m, int c0, int c1, uint64_t *b)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(gwt_sa(dst)), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(gwt_sa(b)) : "memory");
}

#define GWT_THREADS 288   /* two consumer warpgroups + the producer warp */

template <int GU>
__global__ void __launch_bounds__(GWT_THREADS, 1) k_shared_gemm_tma(const __grid_constant__ CUtensorMap tm_a,
                                                                    const __grid_constant__ CUtensorMap tm_b, int H,
                                                                    int I, float limit, int T, int topk, uint16_t *h,
                                                                    float *y)
{
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();   /* sm_90a's alone; the host never launches this elsewhere (sw_ok) */
#else
    const MoeTrace trace_(GU ? MOE_TR_SH_GU : MOE_TR_SH_DN);
    extern __shared__ __align__(16) uint8_t gw_smem[];
    uint8_t *smem = gw_smem + ((1024u - ((unsigned)__cvta_generic_to_shared(gw_smem) & 1023u)) & 1023u);
    uint64_t *full = (uint64_t *)(smem + (size_t)GW_STAGES * GW_STAGE_BYTES), *empty = full + GW_STAGES;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int K = GU ? H : I, nk = K / GM_BK, pre = min(nk, GW_STAGES);
    const int m0 = blockIdx.x * GW_BM, n0 = blockIdx.y * GW_BN;
    auto As = [&](int s) { return smem + (size_t)s * GW_STAGE_BYTES; };
    auto Bs = [&](int s) { return smem + (size_t)s * GW_STAGE_BYTES + GW_A_BYTES; };
    const bool producer = wg == 2 && lane == 0;
    if (tid == 0) {
        for (int s = 0; s < GW_STAGES; s++) {
            gwt_mb_init(&full[s], 1);
            gwt_mb_init(&empty[s], 256);   /* every consumer thread, after its wait for the step's wgmmas */
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    /* the weights do not depend on the previous kernel: their first steps go out before the wait */
    if (producer)
        for (int s = 0; s < pre; s++) {
            gwt_mb_expect(&full[s], GW_STAGE_BYTES);
            gwt_tma(Bs(s), &tm_b, s * GM_BK, n0, &full[s]);
        }
    moe_pdl_wait();
    if (!GU) moe_pdl_release();
    if (wg == 2) {
        if (producer) {
            for (int s = 0; s < pre; s++) gwt_tma(As(s), &tm_a, s * GM_BK, m0, &full[s]);
            for (int kt = GW_STAGES; kt < nk; kt++) {
                const int s = kt % GW_STAGES;
                gwt_mb_wait(&empty[s], (kt / GW_STAGES - 1) & 1);   /* the consumers are done with step kt - S */
                gwt_mb_expect(&full[s], GW_STAGE_BYTES);
                gwt_tma(Bs(s), &tm_b, kt * GM_BK, n0, &full[s]);
                gwt_tma(As(s), &tm_a, kt * GM_BK, m0, &full[s]);
            }
        }
    } else {
        float acc[2][64];
#pragma unroll
        for (int hb = 0; hb < 2; hb++)
#pragma unroll
            for (int i = 0; i < 64; i++) acc[hb][i] = 0.f;
        for (int kt = 0; kt < nk; kt++) {
            const int s = kt % GW_STAGES;
            gwt_mb_wait(&full[s], (kt / GW_STAGES) & 1);
            const uint8_t *as = As(s) + wg * 64 * 128, *bs = Bs(s);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < GM_BK / 16; kk++) gw_mma256(&acc[0][0], gw_desc(as + kk * 32), gw_desc(bs + kk * 32));
            wg_commit();
            wg_wait<1>();   /* step kt - 1's group is complete: its stage goes back to the producer */
            if (kt > 0) gwt_mb_arrive(&empty[(kt - 1) % GW_STAGES]);
        }
        wg_wait<0>();
        gw_epilogue<GU>(acc, m0, n0, wg, warp, g, q, H, I, limit, T, topk, h, y);
    }
    if (GU) moe_pdl_release();
#endif
}

/* cuTensorMapEncodeTiled from the driver (no libcuda link), or NULL */
static PFN_cuTensorMapEncodeTiled_v12000 gwt_encoder()
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn;
    static int tried;
    if (!tried) {
        tried = 1;
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    }
    return fn;
}

/* a bf16 [rows][inner] row-major matrix as boxes of 64 inputs x box_rows rows, 128-byte swizzle, zeros out of bounds */
static cudaError_t gwt_map(CUtensorMap *m, const uint16_t *base, uint64_t inner, uint64_t rows, uint32_t box_rows)
{
    const PFN_cuTensorMapEncodeTiled_v12000 enc = gwt_encoder();
    if (!enc) return cudaErrorNotSupported;
    const cuuint64_t dims[2] = {inner, rows}, strides[1] = {inner * 2};
    const cuuint32_t box[2] = {GM_BK, box_rows}, es[2] = {1, 1};
    const CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, es,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* GU 1: A = x [T][H], B = b13 [2I][H]; GU 0: A = h's shared rows [T][I] (after the T * topk routed pairs), B = b2 [H][I] */
template <int GU>
static cudaError_t shared_gemm_tma_launch(const moe_expert_args *a, const uint16_t *wb, const uint16_t *x, int T,
                                          int topk, uint16_t *h, float *y, cudaStream_t st)
{
    static int raised;
    const size_t sm = (size_t)GW_STAGES * GW_STAGE_BYTES + 1024 + 2 * GW_STAGES * sizeof(uint64_t);
    if (!raised) {
        const cudaError_t e = raise_smem((const void *)k_shared_gemm_tma<GU>, sm);
        if (e != cudaSuccess) return e;
        raised = 1;
    }
    const int K = GU ? a->H : a->I, n = GU ? 2 * a->I : a->H;
    CUtensorMap ma, mb;
    cudaError_t e = gwt_map(&ma, GU ? x : h + (size_t)T * topk * a->I, K, T, GW_BM);
    if (e == cudaSuccess) e = gwt_map(&mb, wb, K, n, GW_BN);
    if (e != cudaSuccess) return e;
    return moe_launch_prio(k_shared_gemm_tma<GU>, dim3((T + GW_BM - 1) / GW_BM, n / GW_BN), dim3(GWT_THREADS), sm, st,
                           a->sh_prio_on ? &a->sh_prio : (const int *)0, ma, mb, a->H, a->I, a->limit, T, topk, h, y);
}

typedef cudaError_t (*gemm_launch_fn)(const moe_expert_args *, const uint16_t *, const uint16_t *, int, int, uint16_t *,
                                      float *, cudaStream_t);

/* gate/up (A = x, B = b13) then down (A = h's shared rows, B = b2) with one form's two launches */
static cudaError_t gemm_pair(gemm_launch_fn gu, gemm_launch_fn dn, const moe_expert_args *a, const uint16_t *b13,
                             const uint16_t *b2, const uint16_t *x, int T, int topk, uint16_t *h, float *y,
                             cudaStream_t st)
{
    const cudaError_t e = gu(a, b13, x, T, topk, h, y, st);
    return e != cudaSuccess ? e : dn(a, b2, h, T, topk, h, y, st);
}

/* the shared expert's gate/up then down, into moe_shared_experts' rows (h and y after the T * topk routed pairs) */
extern "C" cudaError_t moe_shared_gemms(const moe_expert_args *a, const uint16_t *b13, const uint16_t *b2, int fold,
                                        const uint16_t *x, int T, int topk, uint16_t *h, float *y, cudaStream_t st)
{
    /* H, I multiples of the 128-row scale blocks: then 2I and H are whole GM_BN tiles and K whole GM_BK steps */
    if (!b13 || !b2 || T < 1 || a->H % 128 || a->I % 128) return cudaErrorInvalidValue;
    /* folded scales on sm_90a with a driver that encodes tensor maps: wgmma fed by TMA (2I is then a multiple of
       GW_BN too); else mma.sync */
    if (fold && a->H % GW_BN == 0 && sw_ok() && gwt_encoder())
        return gemm_pair(shared_gemm_tma_launch<1>, shared_gemm_tma_launch<0>, a, b13, b2, x, T, topk, h, y, st);
    return fold ? gemm_pair(shared_gemm_launch<1, 1>, shared_gemm_launch<0, 1>, a, b13, b2, x, T, topk, h, y, st)
                : gemm_pair(shared_gemm_launch<1, 0>, shared_gemm_launch<0, 0>, a, b13, b2, x, T, topk, h, y, st);
}

#endif

/* wgmma_sm90.cuh — warpgroup MMA (wgmma.mma_async, sm_90a) for the attention kernel: shared-memory matrix
 * descriptors for the 128-byte swizzled layout, the fences, and the three shapes the kernel issues.
 *
 * Shared-memory layout (both operands, bf16): a matrix of R rows x 64c columns is c chunks of 64 columns, chunk after
 * chunk (R x 128 bytes each, 1024-byte aligned); inside a chunk row r's 16-byte piece p (columns 8p..8p+7) sits at
 * r * 128 + ((p ^ (r & 7)) << 4): the 128-byte swizzle the hardware undoes from the address bits, so an 8-row group
 * is one 1024-byte swizzle atom. Read with the rows as M or N and the columns as K, it is K-major (a k16 step is 32
 * bytes further along a chunk; SBO = 1024, the next 8 rows). Read with the columns as N and the rows as K (the value
 * side of attention, where K = V), it is N-major: LBO = R x 128 (the next 64 columns), SBO = 1024 (the next 8 rows
 * of K).
 *
 * Accumulator layout of m64nN (f32, thread t of the warpgroup, warp w = t / 32, lane 4 g + q): d[4i], d[4i+1] =
 * D[16w + g][8i + 2q, +1], d[4i+2], d[4i+3] = D[16w + g + 8][8i + 2q, +1]. A from registers (m64nNk16 bf16): the
 * mma.m16n8k16 A fragment of the warp's 16 rows, so the accumulators of n8 blocks 2s and 2s+1, rounded and packed in
 * pairs, are the A fragment of k16 step s of a following product.
 */
#ifndef SLUICE_WGMMA_SM90_CUH
#define SLUICE_WGMMA_SM90_CUH

#include <stdint.h>

/* Descriptor of a 128-byte swizzled operand at shared address `addr` (bytes; the atom 1024-aligned) */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | (uint64_t)1 << 62;
}

/* Before the first wgmma that reads accumulator or A registers other instructions wrote */
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* After wg_wait: the accumulators are read only from here on (the compiler may not move their reads above it) */
template <int N> __device__ __forceinline__ void wg_fence_acc(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* Shared memory written by ordinary stores or cp.async, before a wgmma (the async proxy) reads it */
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

/* d (64 x 64) (+)= A (64 x 16, K-major at da) B (16 x 64: 64 rows K-major at db); acc 0: d = A B */
__device__ __forceinline__ void wg_m64n64k16_ss(float d[32], uint64_t da, uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
                 "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
                 "%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc)
                 : "memory");
}

/* the 128 accumulator registers of an m64n256 product: operands %0..%127, then the instruction's other operands */
#define WG_D128 \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11," \
    "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23," \
    "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35," \
    "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59," \
    "%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71," \
    "%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83," \
    "%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107," \
    "%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119," \
    "%120,%121,%122,%123,%124,%125,%126,%127}"
#define WG_D128_OUT(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
    "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
    "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
    "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), \
    "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), \
    "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
    "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
    "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), \
    "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), \
    "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), \
    "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), \
    "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), \
    "+f"(d[126]), "+f"(d[127])

/* d (64 x 256) (+)= A (64 x 16: four registers, the m16n8k16 A fragment of the warp's rows) B (16 x 256, N-major at
 * db) */
__device__ __forceinline__ void wg_m64n256k16_rs(float d[128], const uint32_t a[4], uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WG_D128
                 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                 : WG_D128_OUT(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc)
                 : "memory");
}

/* d (64 x 256) (+)= A (64 x 16, K-major at da) B (16 x 256 at db: TB 0 K-major, its 256 rows; TB 1 N-major) */
template <int TB>
__device__ __forceinline__ void wg_m64n256k16_ss(float d[128], uint64_t da, uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WG_D128 ", %128, %129, p, 1, 1, 0, %131;\n}\n"
                 : WG_D128_OUT(d)
                 : "l"(da), "l"(db), "r"(acc), "n"(TB)
                 : "memory");
}

#endif

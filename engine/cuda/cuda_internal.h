/* cuda_internal.h — internals of the "cuda" backend (not a public interface).
 *
 * backend_cuda.c  device weights, the state arenas (v4_state_store), the step: every op of
 *                 V4_SPEC 2 on the GPU (kernels/dense_gemm.h, kernels/v4_ops.h, the MoE below)
 * moe_load.c      each layer's MoE: the fast kernels (moe_cuda.h) where the shape fits them, else
 *                 the generic kernel (v4_moe_ref)
 */
#ifndef SLUICE_CUDA_INTERNAL_H
#define SLUICE_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "../backend.h"
#include "../shard.h"
#include "moe_cuda.h"
#include "moe_kernels.h"
#include "v4_ops.h"

typedef struct {
    int n_layers;
    int *fast;             /* [n_layers] 1: moe_cuda layer L[l]; 0: generic ref[l] */
    moe_cuda_layer *L;
    v4_moe_ref_w *ref;
    moe_cuda_ws W;         /* one workspace for every fast layer (same shapes) */
    int ws_ok;
    v4_shard sh;           /* the rank's share of every expert (its intermediate units) */
} gpu_moe;

/* Upload every layer's MoE (fast where the shape fits, else generic), each expert's units of the rank sh (the whole
 * expert for one rank), with a workspace for max_tokens tokens. 0, or -1 with one line in err. */
int gpu_moe_load(gpu_moe *g, const v4_weights *w, const v4_shard *sh, int max_tokens, char *err, size_t errlen);
/* 0 when the fast MoE kernels take the model's experts as the rank sh holds them, else -1 with one line in err naming
 * the first constraint it breaks (its layers then run the generic MoE). */
int gpu_moe_fast_fits(const v4_weights *w, const v4_shard *sh, char *err, size_t errlen);
/* The shared experts' bf16 copies where memory allows, keeping `reserve` bytes of the GPU free. */
int gpu_moe_add_shared_bf16(gpu_moe *g, const v4_weights *w, size_t reserve, char *err, size_t errlen);
void gpu_moe_free(gpu_moe *g);

#endif

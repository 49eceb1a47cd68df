/* synthetic.h — a V4-Flash-shaped model with seeded random weights, for tests and benchmarks that
 * need the real shapes without the 150+ GB checkpoint.
 *
 * Spec: "v4-flash[:layers=N,experts=mxfp4|nvfp4,routing=uniform|gate,ratios=a,b,...,seed=S]". layers=N
 * means V4-Flash's layers 0..N-1 (0 and 1 sliding-window only, then CSA (4) and HCA (128) alternating);
 * ratios= overrides the compress ratio of each layer (its count sets the layers when layers= is absent).
 * routing=uniform (default): every layer routes by a uniform random token -> 6 experts table, so the experts a
 * batch reads are what uniform top-6 routing reads; routing=gate: V4-Flash's scheme (hash layers 0..2, then the
 * learned gate, with random weights).
 * Engine model paths "synthetic:SPEC" open one (sluice-generate --synthetic, sluice-bench, the worker).
 *
 * host_experts = 0 leaves the routed experts' bytes out of host memory (each qtensor carries a
 * synth_seed; the cuda backend draws them on the GPU at load): ~3.4 GB a layer that the CPU never
 * needs. The CPU backend needs host_experts = 1.
 */
#ifndef SLUICE_SYNTHETIC_H
#define SLUICE_SYNTHETIC_H

#include <stdint.h>

#include "weights.h"

enum { SYNTH_MXFP4 = 0, SYNTH_NVFP4 = 1 };
enum { SYNTH_ROUTE_UNIFORM = 0, SYNTH_ROUTE_GATE = 1 };

typedef struct {
    int layers;
    int experts;          /* SYNTH_MXFP4 | SYNTH_NVFP4 */
    int routing;          /* SYNTH_ROUTE_UNIFORM | SYNTH_ROUTE_GATE */
    int ratios[64];
    int n_ratios;         /* 0: V4-Flash's */
    uint64_t seed;
} synth_spec;

/* The config a spec describes, without its weights (sizing, tests). 0, or -1 with one line in err. */
int v4_synthetic_config(const char *spec, v4_config *c, char *err, size_t errlen);
/* 0, or -1 with one line in err (bad spec, out of memory). Free with v4_weights_free. */
int v4_weights_synthetic(const char *spec, int host_experts, v4_weights *w, char *err, size_t errlen);

#endif

/* fuzz_config.c — libFuzzer target for engine/config.c: the input is a config.json text, parsed by
 * v4_config_parse as the engine does at open (transformers or DeepSeek hub layout). Any input must
 * give a configuration or one error line, never a crash or undefined behaviour. An accepted
 * configuration must be one the engine can size its buffers from: positive dimensions, layers
 * within V4_MAX_LAYERS, the EOS list within V4_MAX_EOS, a terminated model id; and the RoPE
 * frequencies computed from it must be finite. A violation aborts.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_config: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    v4_config c;
    char err[512];
    if (v4_config_parse((const char *)data, size, &c, err, sizeof err)) {
        if (!memchr(err, 0, sizeof err) || !err[0]) fail("error without a message");
        return 0;
    }
    if (c.n_layers < 1 || c.n_layers > V4_MAX_LAYERS) fail("n_layers out of range");
    if (c.vocab_size < 1 || c.dim < 1 || c.n_heads < 1 || c.head_dim < 1) fail("a dimension is not positive");
    if (c.rope_dim < 0 || c.rope_dim > c.head_dim || c.rope_dim % 2) fail("rope_dim does not fit the head");
    if (c.n_eos < 0 || c.n_eos > V4_MAX_EOS) fail("n_eos out of range");
    if (!memchr(c.model_id, 0, sizeof c.model_id) || !memchr(c.quant_method, 0, sizeof c.quant_method) ||
        !memchr(c.expert_dtype, 0, sizeof c.expert_dtype))
        fail("a name is not terminated");
    for (int l = 0; l < c.n_layers; l++)
        if (c.compress_ratio[l] < 0) fail("negative compress ratio");
    if (c.rope_dim > 0 && c.rope_dim <= 4096) {
        double f[2048];
        v4_rope_inv_freq(&c.rope_main, c.rope_dim, f);
        for (int i = 0; i < c.rope_dim / 2; i++)
            if (!isfinite(f[i])) fail("rope_main: inverse frequency not finite");
        v4_rope_inv_freq(&c.rope_compress, c.rope_dim, f);
        for (int i = 0; i < c.rope_dim / 2; i++)
            if (!isfinite(f[i])) fail("rope_compress: inverse frequency not finite");
    }
    return 0;
}

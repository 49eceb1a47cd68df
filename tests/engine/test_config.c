/* test_config.c — config.json in transformers' and DeepSeek hub's layouts; every missing or
 * inconsistent field gives an error naming it; rope inverse frequencies incl. YaRN; synthetic specs' configs. */
#include "check.h"
#include "config.h"
#include "synthetic.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A config is a list of "key": value members; tests drop or replace one and re-serialise. */
static const char *HF[] = {
    "\"vocab_size\": 256", "\"hidden_size\": 64", "\"num_hidden_layers\": 4", "\"num_attention_heads\": 4",
    "\"head_dim\": 32", "\"q_lora_rank\": 32", "\"o_groups\": 2", "\"o_lora_rank\": 16", "\"sliding_window\": 8",
    "\"rms_norm_eps\": 1e-06", "\"num_key_value_heads\": 1", "\"partial_rotary_factor\": 0.25",
    "\"qk_rope_head_dim\": 8", "\"n_routed_experts\": 8", "\"n_shared_experts\": 1", "\"num_experts_per_tok\": 2",
    "\"moe_intermediate_size\": 32", "\"routed_scaling_factor\": 1.5", "\"swiglu_limit\": 0.6",
    "\"scoring_func\": \"sqrtsoftplus\"", "\"hc_mult\": 4", "\"hc_sinkhorn_iters\": 20", "\"hc_eps\": 1e-06",
    "\"num_nextn_predict_layers\": 0", "\"max_position_embeddings\": 4096",
    "\"layer_types\": [\"sliding_attention\", \"compressed_sparse_attention\", \"heavily_compressed_attention\", "
    "\"compressed_sparse_attention\"]",
    "\"compress_rates\": {\"compressed_sparse_attention\": 4, \"heavily_compressed_attention\": 8}",
    "\"mlp_layer_types\": [\"hash_moe\", \"moe\", \"moe\", \"moe\"]",
    "\"index_head_dim\": 16", "\"index_n_heads\": 4", "\"index_topk\": 3",
    "\"rope_theta\": 10000.0", "\"compress_rope_theta\": 160000.0",
    "\"rope_parameters\": {\"main\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}, \"compress\": "
    "{\"rope_theta\": 160000.0, \"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": "
    "4096, \"beta_fast\": 32, \"beta_slow\": 1}}",
    "\"bos_token_id\": 1", "\"eos_token_id\": 2", NULL};

/* What make_official.py writes (hub_config) for a V4-Flash-like layout, with one MTP entry. */
static const char *HUB[] = {
    "\"vocab_size\": 129280", "\"hidden_size\": 4096", "\"num_hidden_layers\": 6", "\"num_attention_heads\": 64",
    "\"head_dim\": 512", "\"q_lora_rank\": 1024", "\"o_groups\": 8", "\"o_lora_rank\": 1024",
    "\"sliding_window\": 128", "\"rms_norm_eps\": 1e-06", "\"num_key_value_heads\": 1", "\"qk_rope_head_dim\": 64",
    "\"n_routed_experts\": 256", "\"n_shared_experts\": 1", "\"num_experts_per_tok\": 6",
    "\"moe_intermediate_size\": 2048", "\"routed_scaling_factor\": 1.5", "\"swiglu_limit\": 10.0",
    "\"scoring_func\": \"sqrtsoftplus\"", "\"hc_mult\": 4", "\"hc_sinkhorn_iters\": 20", "\"hc_eps\": 1e-06",
    "\"num_nextn_predict_layers\": 1", "\"max_position_embeddings\": 1048576", "\"num_hash_layers\": 3",
    "\"compress_ratios\": [0, 0, 4, 128, 4, 128, 0]", "\"index_head_dim\": 128", "\"index_n_heads\": 64",
    "\"index_topk\": 512", "\"rope_theta\": 10000", "\"compress_rope_theta\": 160000",
    "\"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 16, \"original_max_position_embeddings\": "
    "65536, \"type\": \"yarn\"}",
    "\"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\", "
    "\"scale_fmt\": \"ue8m0\", \"weight_block_size\": [128, 128]}",
    "\"expert_dtype\": \"fp4\"", "\"bos_token_id\": 0", "\"eos_token_id\": [1, 128803]", NULL};

/* Serialise `base`, leaving out member `skip` (by key) and appending `extra` members (override). */
static char *build(const char **base, const char *skip, const char *extra)
{
    size_t cap = 16384, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{");
    int first = 1;
    for (int i = 0; base[i]; i++) {
        char key[80];
        const char *q = strchr(base[i] + 1, '"');
        size_t kl = (size_t)(q - base[i] - 1);
        memcpy(key, base[i] + 1, kl);
        key[kl] = 0;
        if (skip && !strcmp(key, skip)) continue;
        if (extra) { /* an override replaces the member with the same key */
            char pat[96];
            snprintf(pat, sizeof(pat), "\"%s\":", key);
            if (strstr(extra, pat)) continue;
        }
        n += (size_t)snprintf(s + n, cap - n, "%s%s", first ? "" : ", ", base[i]);
        first = 0;
    }
    if (extra) n += (size_t)snprintf(s + n, cap - n, "%s%s", first ? "" : ", ", extra);
    snprintf(s + n, cap - n, "}");
    return s;
}

static int parse(const char **base, const char *skip, const char *extra, v4_config *c, char *err, size_t el)
{
    char *s = build(base, skip, extra);
    int rc = v4_config_parse(s, strlen(s), c, err, el);
    free(s);
    return rc;
}

/* Parsing must fail with an error line that contains `needle`. */
static void expect_err(const char **base, const char *skip, const char *extra, const char *needle)
{
    v4_config c;
    char err[256] = "";
    int rc = parse(base, skip, extra, &c, err, sizeof(err));
    if (rc != -1 || !strstr(err, needle) || strchr(err, '\n')) {
        fprintf(stderr, "expected error with \"%s\" (skip %s, extra %s), got rc %d: \"%s\"\n", needle,
                skip ? skip : "-", extra ? extra : "-", rc, err);
        check_failures++;
    }
}

static void test_hf(void)
{
    v4_config c;
    char err[256];
    CHECK(parse(HF, NULL, NULL, &c, err, sizeof(err)) == 0);
    CHECK(c.hub_format == 0 && c.vocab_size == 256 && c.dim == 64 && c.n_layers == 4 && c.n_heads == 4);
    CHECK(c.head_dim == 32 && c.rope_dim == 8 && c.q_lora_rank == 32 && c.o_groups == 2 && c.o_lora_rank == 16);
    CHECK(c.window == 8 && c.norm_eps == 1e-6f);
    CHECK(c.compress_ratio[0] == 0 && c.compress_ratio[1] == 4 && c.compress_ratio[2] == 8 && c.compress_ratio[3] == 4);
    CHECK(c.hash_layer[0] == 1 && c.hash_layer[1] == 0 && c.hash_layer[3] == 0);
    CHECK(c.n_routed_experts == 8 && c.n_shared_experts == 1 && c.n_active == 2 && c.moe_inter == 32);
    CHECK(c.route_scale == 1.5f && c.swiglu_limit == 0.6f && c.score_func == V4_SCORE_SQRTSOFTPLUS);
    CHECK(c.index_n_heads == 4 && c.index_head_dim == 16 && c.index_topk == 3);
    CHECK(c.hc_mult == 4 && c.hc_sinkhorn_iters == 20 && c.hc_eps == 1e-6f);
    CHECK(c.rope_main.theta == 10000.0 && c.rope_main.yarn == 0);
    CHECK(c.rope_compress.theta == 160000.0 && c.rope_compress.yarn == 1 && c.rope_compress.yarn_factor == 4.0);
    CHECK(c.rope_compress.yarn_orig_len == 4096 && c.rope_compress.yarn_beta_fast == 32 &&
          c.rope_compress.yarn_beta_slow == 1);
    CHECK(c.bos_id == 1 && c.n_eos == 1 && c.eos_ids[0] == 2 && c.max_position == 4096 && c.n_mtp_layers == 0);
    CHECK(!strcmp(c.model_id, "model"));

    /* YaRN inverse frequencies, values from reference/v4_reference.py inv_freqs */
    double f[4];
    v4_rope_inv_freq(&c.rope_compress, 8, f);
    CHECK_NEAR(f[0], 1.0, 1e-15);
    CHECK_NEAR(f[1] / 0x1.999999999999ap-5, 1, 1e-14);
    CHECK_NEAR(f[2] / 0x1.999999999999ap-10, 1, 1e-14);
    CHECK_NEAR(f[3] / 0x1.0624dd2f1a9fcp-15, 1, 1e-14);
    v4_rope_inv_freq(&c.rope_main, 8, f);
    CHECK_NEAR(f[1] / 0x1.999999999999ap-4, 1, 1e-14);
    CHECK_NEAR(f[2] / 0x1.47ae147ae147bp-7, 1, 1e-14);
    CHECK_NEAR(f[3] / 0x1.0624dd2f1a9fcp-10, 1, 1e-14);

    /* variants: eos list, softmax scoring, rope_dim from partial_rotary_factor alone, no mlp_layer_types */
    CHECK(parse(HF, "qk_rope_head_dim", "\"eos_token_id\": [2, 5], \"scoring_func\": \"softmax\"", &c, err,
                sizeof(err)) == 0);
    CHECK(c.rope_dim == 8 && c.n_eos == 2 && c.eos_ids[1] == 5 && c.score_func == V4_SCORE_SOFTMAX);
    CHECK(parse(HF, "mlp_layer_types", "\"num_hash_layers\": 2, \"bos_token_id\": null", &c, err, sizeof(err)) == 0);
    CHECK(c.hash_layer[0] == 1 && c.hash_layer[1] == 1 && c.hash_layer[2] == 0 && c.bos_id == -1);
    CHECK(parse(HF, "partial_rotary_factor", "\"hidden_size\": 64.0", &c, err, sizeof(err)) == 0);
    CHECK(c.rope_dim == 8 && c.dim == 64);
    /* no CSA layer: indexer fields not needed */
    CHECK(parse(HF, "index_topk",
                "\"layer_types\": [\"sliding_attention\", \"heavily_compressed_attention\", \"sliding_attention\", "
                "\"heavily_compressed_attention\"]",
                &c, err, sizeof(err)) == 0);
}

static void test_hub(void)
{
    v4_config c;
    char err[256];
    CHECK(parse(HUB, NULL, NULL, &c, err, sizeof(err)) == 0);
    if (check_failures) fprintf(stderr, "%s\n", err);
    CHECK(c.hub_format == 1 && c.n_layers == 6 && c.n_mtp_layers == 1 && c.head_dim == 512 && c.rope_dim == 64);
    static const int want[6] = {0, 0, 4, 128, 4, 128};
    for (int i = 0; i < 6; i++) CHECK(c.compress_ratio[i] == want[i] && c.hash_layer[i] == (i < 3));
    CHECK(c.rope_main.theta == 10000.0 && !c.rope_main.yarn);
    CHECK(c.rope_compress.theta == 160000.0 && c.rope_compress.yarn && c.rope_compress.yarn_factor == 16 &&
          c.rope_compress.yarn_orig_len == 65536);
    CHECK(c.n_eos == 2 && c.eos_ids[0] == 1 && c.eos_ids[1] == 128803 && c.bos_id == 0);
    CHECK(!strcmp(c.quant_method, "fp8") && !strcmp(c.expert_dtype, "fp4"));
    CHECK(c.swiglu_limit == 10.0f && c.max_position == 1048576);

    /* V4-Flash YaRN (V4_SPEC §1): low 15, high 25; i <= 15 unchanged, i >= 25 divided by 16 */
    double f[32];
    v4_rope_inv_freq(&c.rope_compress, 64, f);
    static const int idx[7] = {0, 15, 16, 20, 24, 25, 31};
    static const double ref[7] = {0x1.0000000000000p+0, 0x1.dc846ea3d79a9p-9, 0x1.28f5c28f5c290p-9,
                                  0x1.37675d863cab3p-12, 0x1.47ae147ae147ap-16, 0x1.6887a10035b11p-18,
                                  0x1.30f898bac76d3p-21};
    for (int i = 0; i < 7; i++) CHECK_NEAR(f[idx[i]] / ref[i], 1, 1e-13);
    for (int i = 0; i < 32; i++) {
        double plain = pow(160000.0, -2.0 * i / 64);
        if (i <= 15) CHECK_NEAR(f[i] / plain, 1, 1e-13);
        if (i >= 25) CHECK_NEAR(f[i] * 16 / plain, 1, 1e-13);
        if (i == 20) CHECK_NEAR(f[i] / plain, 0.5 / 16 + 0.5, 1e-13);
    }

    /* no MTP entry, no rope_scaling, compress_ratios exactly n_layers */
    CHECK(parse(HUB, "rope_scaling", "\"num_nextn_predict_layers\": 0, \"compress_ratios\": [0, 0, 4, 128, 4, 128]",
                &c, err, sizeof(err)) == 0);
    CHECK(!c.rope_compress.yarn && c.compress_ratio[5] == 128 && c.n_mtp_layers == 0);
    /* other ratios are HCA-style */
    CHECK(parse(HUB, NULL, "\"compress_ratios\": [0, 16, 4, 2, 4, 128, 0]", &c, err, sizeof(err)) == 0);
    CHECK(c.compress_ratio[1] == 16 && c.compress_ratio[3] == 2);
}

static void test_errors(void)
{
    /* every required field, missing, is named */
    static const char *req_hf[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                                   "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window", "rms_norm_eps",
                                   "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
                                   "moe_intermediate_size", "routed_scaling_factor", "hc_mult",
                                   "max_position_embeddings", "index_head_dim", "index_n_heads", "index_topk", NULL};
    for (int i = 0; req_hf[i]; i++) {
        char needle[96];
        snprintf(needle, sizeof(needle), "field '%s' missing", req_hf[i]);
        expect_err(HF, req_hf[i], NULL, needle);
        expect_err(HUB, req_hf[i], NULL, needle);
    }
    expect_err(HF, "layer_types", NULL, "'layer_types' missing");
    expect_err(HUB, "compress_ratios", NULL, "'layer_types' missing");
    char *s = build(HF, "qk_rope_head_dim", NULL);
    free(s);
    {
        /* neither qk_rope_head_dim nor partial_rotary_factor */
        static const char *h2[64];
        int n = 0;
        for (int i = 0; HF[i]; i++)
            if (!strstr(HF[i], "partial_rotary_factor")) h2[n++] = HF[i];
        h2[n] = NULL;
        expect_err(h2, "qk_rope_head_dim", NULL, "field 'qk_rope_head_dim' missing");
    }
    /* inconsistent */
    expect_err(HF, NULL, "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\"]",
               "layer_types has 3 entries, num_hidden_layers is 4");
    expect_err(HF, NULL, "\"mlp_layer_types\": [\"moe\"]", "mlp_layer_types has 1 entries, num_hidden_layers is 4");
    expect_err(HF, NULL, "\"mlp_layer_types\": [\"moe\", \"dense\", \"moe\", \"moe\"]", "mlp_layer_types[1]");
    expect_err(HF, "compress_rates", NULL, "compress_rates");
    expect_err(HF, NULL, "\"compress_rates\": {\"compressed_sparse_attention\": 0, \"heavily_compressed_attention\": 8}",
               "compress_rates.compressed_sparse_attention");
    expect_err(HF, NULL, "\"qk_rope_head_dim\": 12", "partial_rotary_factor 0.25 * head_dim 32 = 8, qk_rope_head_dim is 12");
    expect_err(HF, "partial_rotary_factor", "\"qk_rope_head_dim\": 7", "qk_rope_head_dim");
    expect_err(HF, NULL, "\"o_groups\": 3", "'o_groups'");
    expect_err(HF, NULL, "\"num_experts_per_tok\": 9", "'num_experts_per_tok'");
    expect_err(HF, NULL, "\"num_key_value_heads\": 2", "'num_key_value_heads'");
    expect_err(HF, NULL, "\"head_dim\": \"32\"", "'head_dim'");
    expect_err(HF, NULL, "\"head_dim\": 32.5", "'head_dim'");
    expect_err(HF, NULL, "\"num_hidden_layers\": 1000", "'num_hidden_layers'");
    expect_err(HF, NULL, "\"eos_token_id\": 256", "'eos_token_id'");
    expect_err(HF, NULL, "\"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]", "'eos_token_id'");
    expect_err(HF, NULL, "\"scoring_func\": \"relu\"", "'scoring_func'");
    expect_err(HF, NULL, "\"rms_norm_eps\": -1", "'rms_norm_eps'");
    expect_err(HF, NULL, "\"rope_parameters\": {\"main\": {\"rope_theta\": 10000.0}}", "'rope_parameters.compress' missing");
    expect_err(HF, NULL,
               "\"rope_parameters\": {\"main\": {\"rope_theta\": 10000.0}, \"compress\": {\"rope_type\": \"yarn\", "
               "\"factor\": 4}}",
               "'rope_parameters.compress.original_max_position_embeddings' missing");
    expect_err(HF, NULL,
               "\"rope_parameters\": {\"main\": {\"rope_type\": \"llama3\"}, \"compress\": {}}",
               "'rope_parameters.main.rope_type'");
    expect_err(HUB, NULL, "\"compress_ratios\": [0, 0, 4, 128, 4]", "compress_ratios has 5 entries, num_hidden_layers is 6");
    expect_err(HUB, NULL, "\"compress_ratios\": [0, 0, 4, 128, 4, 128, 0, 0, 0]", "compress_ratios has 9 entries");
    expect_err(HUB, NULL, "\"compress_ratios\": [0, 0, 4, -1, 4, 128, 0]", "compress_ratios[3]");
    expect_err(HUB, NULL, "\"num_hash_layers\": 7", "'num_hash_layers'");
    expect_err(HUB, NULL, "\"rope_scaling\": {\"type\": \"yarn\", \"original_max_position_embeddings\": 65536}",
               "'rope_scaling.factor' missing");
    expect_err(HUB, NULL,
               "\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [64, 64]}",
               "'quantization_config.weight_block_size'");
    expect_err(HUB, NULL, "\"index_head_dim\": 32", "'index_head_dim'");
    expect_err(HF, NULL, "\"num_attention_heads\": 65536, \"head_dim\": 65536, \"qk_rope_head_dim\": 16384, \"index_head_dim\": 16384",
               "num_attention_heads * head_dim = 4294967296 is too large");
    expect_err(HF, NULL, "\"hc_mult\": 64, \"hidden_size\": 1048576", "too large");

    /* not JSON / not an object / empty / duplicate keys */
    v4_config c;
    char err[256];
    CHECK(v4_config_parse("{\"vocab_size\": 1,", 17, &c, err, sizeof(err)) == -1 && strstr(err, "invalid JSON"));
    CHECK(v4_config_parse("[1, 2]", 6, &c, err, sizeof(err)) == -1 && strstr(err, "object"));
    CHECK(v4_config_parse("", 0, &c, err, sizeof(err)) == -1 && strstr(err, "invalid JSON"));
    CHECK(v4_config_parse("{\"a\": 1, \"a\": 2}", 16, &c, err, sizeof(err)) == -1);
    /* an error buffer of size 1 or NULL must not overflow */
    CHECK(v4_config_parse("{}", 2, &c, err, 1) == -1 && err[0] == 0);
    CHECK(v4_config_parse("{}", 2, &c, NULL, 0) == -1);
}

static void test_load(void)
{
    v4_config c;
    char err[512];
    CHECK(v4_config_load(SLUICE_TEST_DATA "/tiny-v4-public/", &c, err, sizeof(err)) == 0);
    CHECK(!strcmp(c.model_id, "tiny-v4-public") && c.compress_ratio[2] == 8 && !c.rope_compress.yarn);
    CHECK(c.rope_compress.theta == 160000.0 && c.rope_main.theta == 10000.0);
    CHECK(v4_config_load(SLUICE_TEST_DATA "/no-such-dir", &c, err, sizeof(err)) == -1 && strstr(err, "config.json"));
}

/* random byte edits of a valid config: never a crash; a success still satisfies the invariants */
static void test_fuzz(void)
{
    char *base = build(HF, NULL, NULL);
    size_t n = strlen(base);
    char *buf = malloc(n + 1);
    uint32_t s = 88172645u;
    int ok = 0;
    for (int it = 0; it < 5000; it++) {
        memcpy(buf, base, n + 1);
        for (int k = 0; k < 1 + it % 3; k++) {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            size_t pos = s % n;
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            buf[pos] = "0123456789-.e,:[]{}\" x"[s % 21];
        }
        v4_config c;
        char err[256];
        if (v4_config_parse(buf, n, &c, err, sizeof(err)) == 0) {
            ok++;
            CHECK(c.n_layers >= 1 && c.n_layers <= V4_MAX_LAYERS && c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim);
            CHECK(c.n_active <= c.n_routed_experts && c.n_heads % c.o_groups == 0 && c.n_eos <= V4_MAX_EOS);
            for (int i = 0; i < c.n_layers; i++) CHECK(c.compress_ratio[i] >= 0);
        } else {
            CHECK(err[0] && !strchr(err, '\n'));
        }
    }
    CHECK(ok > 0);
    free(buf);
    free(base);
}

/* A synthetic spec's config: V4-Flash's layer pattern; uniform routing hashes every layer, gate routing only 0..2;
 * a bad spec names what is wrong. */
static void test_synthetic(void)
{
    v4_config c;
    char err[256];
    CHECK(v4_synthetic_config("v4-flash:layers=6", &c, err, sizeof err) == 0);
    CHECK(c.n_layers == 6 && c.dim == 4096 && c.n_routed_experts == 256 && c.n_active == 6);
    static const int ratios[6] = {0, 0, 4, 128, 4, 128};
    for (int l = 0; l < 6; l++) CHECK(c.compress_ratio[l] == ratios[l] && c.hash_layer[l] == 1);
    CHECK(v4_synthetic_config("v4-flash:layers=6,routing=gate,experts=nvfp4", &c, err, sizeof err) == 0);
    for (int l = 0; l < 6; l++) CHECK(c.hash_layer[l] == (l < 3));
    CHECK(strstr(c.model_id, "nvfp4-gate") != NULL);
    CHECK(v4_synthetic_config("v4-flash:ratios=4,128,0", &c, err, sizeof err) == 0);
    CHECK(c.n_layers == 3 && c.compress_ratio[0] == 4 && c.compress_ratio[1] == 128 && c.compress_ratio[2] == 0);
    CHECK(v4_synthetic_config("v4-flash:routing=learned", &c, err, sizeof err) == -1 && strstr(err, "routing"));
    CHECK(v4_synthetic_config("v4-flash:layers=44", &c, err, sizeof err) == -1 && strstr(err, "1..43"));
    CHECK(v4_synthetic_config("v4-flash:depth=4", &c, err, sizeof err) == -1 && strstr(err, "unknown key 'depth'"));
    CHECK(v4_synthetic_config("v4-pro", &c, err, sizeof err) == -1 && strstr(err, "expected v4-flash"));
}

int main(void)
{
    test_synthetic();
    test_fuzz();
    test_hf();
    test_hub();
    test_errors();
    test_load();
    CHECK_DONE();
}

#!/usr/bin/env python3
"""Makes the extra DeepSeek-V4 test fixtures in tests/data/ (see tests/data/README.md).

Derived from ../shared/fixtures/make_v4_fixtures.py (same randomisation, same stable top-k
patch, same prefix-forward reference rows); the converters it needs are copied into
tests/data/tools/ so a fresh clone (and the GPU machine, which gets only the repo) has them.

Usage (needs torch + transformers >= 5.17 for every mode but `configs`):
  python3 make_fixtures.py all OUTDIR [--pack PACKDIR]     everything below, in parallel
  python3 make_fixtures.py hf OUTDIR NAME                  one transformers-made fixture
      NAME: tiny-v4-bf16 | tiny-v4-hc2-yarn-long
  python3 make_fixtures.py quant OUTDIR                    float source -> make_official.py
      (hub FP8+MXFP4 sharded with MTP, ModelOpt NVFP4) -> reference rows from the dequantised
      copies -> OUTDIR/tiny-v4-hub-fp8-mxfp4, OUTDIR/tiny-v4-modelopt-nvfp4
  python3 make_fixtures.py oracle CKPT FIXTURE NAME        rows for one checkpoint (internal)
  python3 make_fixtures.py configs                         print the configs (no torch needed)
  python3 make_fixtures.py regen SRC_BF16 WORK [SUMS]      re-make A/B + dequantised copies from the
      bf16 copy of the float source (no torch needed; see README)

Every fixture directory gets oracle.json (prompts, new_tokens, greedy, rows, and the
HF full-forward / cached-path agreement with the prefix rows) and logits_i.f32.
"""
import argparse
import copy
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, 'tools')
sys.path.insert(0, TOOLS)
sys.path.insert(0, HERE)

NEW_TOKENS = 24
MIN_MARGIN = 1e-4     # smallest allowed top-1 margin at a greedy step (see write_oracle)
MARGIN_TRIES = 4

# ----------------------------------------------------------------------------- configs
# Base: the public fixture's config (../shared/fixtures/make_v4_fixtures.py `pub`).
PUB = dict(vocab_size=256, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=4,
           num_attention_heads=4, num_key_value_heads=1, head_dim=32, q_lora_rank=32,
           num_experts_per_tok=2, n_routed_experts=8, n_shared_experts=1, scoring_func="sqrtsoftplus",
           norm_topk_prob=True, routed_scaling_factor=1.5, max_position_embeddings=4096,
           rope_theta=10000.0, compress_rope_theta=160000.0,
           layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                        "compressed_sparse_attention"],
           mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
           compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
           hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=0.6, sliding_window=8,
           o_groups=2, o_lora_rank=16, index_n_heads=4, index_head_dim=16, index_topk=3,
           num_nextn_predict_layers=0, partial_rotary_factor=0.25, rms_norm_eps=1e-6,
           bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)

# (a) bf16-stored weights; reference computed in float32 from exactly those bf16 values.
BF16 = dict(PUB, index_topk=2)

# (b) hc_mult 2, window 16, YaRN on the compress rope, HCA ratio 8, 5 layers (two HCA, two CSA),
#     two hash layers, sigmoid scoring, index_topk 4 (prompts of 60-120 tokens: 15-30 entries).
#     rope dim 16 (head 64 x 0.25): with original 4096, factor 4, beta 32/1 the YaRN ramp is
#     low=2, high=5: theta_0..2 unchanged, theta_3,4 blended, theta_5..7 divided by 4.
#     attention_factor 1.0: DeepSeek applies no mscale (transformers' V4 config sets it too).
HC2 = dict(PUB, hidden_size=64, head_dim=64, num_attention_heads=4, q_lora_rank=32, o_groups=2, o_lora_rank=16,
           num_hidden_layers=5,
           layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                        "compressed_sparse_attention", "heavily_compressed_attention"],
           mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe"],
           compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
           hc_mult=2, sliding_window=16, index_topk=4, index_n_heads=2, index_head_dim=32,
           scoring_func="sigmoid", routed_scaling_factor=2.0, swiglu_limit=1.0,
           max_position_embeddings=16384,
           rope_parameters=dict(
               main={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
               compress={"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.25,
                         "factor": 4.0, "original_max_position_embeddings": 4096,
                         "beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": 1.0}))

# Float source for the quantised formats: every Linear dimension a multiple of 128 (FP8 128x128
# blocks: wq_a/wq_b/wkv/wo_a/wo_b, indexer wq_b, shared experts; MXFP4/NVFP4 experts need in%32).
# rope 64 of head 128, YaRN like the real model (factor 16, beta 32/1) with original 4096.
QSRC = dict(PUB, vocab_size=256, hidden_size=256, moe_intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, head_dim=128, q_lora_rank=128, o_groups=2, o_lora_rank=128,
            index_n_heads=2, index_head_dim=128, index_topk=4, partial_rotary_factor=0.5,
            layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                         "compressed_sparse_attention"],
            mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
            hc_mult=4, sliding_window=16, swiglu_limit=1.0, max_position_embeddings=65536,
            rope_parameters=dict(
                main={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
                compress={"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.5,
                          "factor": 16.0, "original_max_position_embeddings": 4096,
                          "beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": 1.0}))


def prompts_for(seed, lens, vocab):
    """Token-id prompts starting with BOS (1); ids 3..vocab-1 (pure Python, no torch)."""
    g = random.Random(seed)
    return [[1] + [g.randrange(3, vocab) for _ in range(n - 1)] for n in lens]


FIXTURES = {
    'tiny-v4-bf16': dict(cfg=BF16, seed=20261201, store='bf16', prompts=prompts_for(11, [21, 46, 70, 3], 256)),
    'tiny-v4-hc2-yarn-long': dict(cfg=HC2, seed=20261202, store='f32', prompts=prompts_for(12, [97, 64, 120, 9], 256)),
}
QUANT = dict(cfg=QSRC, seed=20261203, prompts=prompts_for(13, [100, 61, 37, 5], 256))
QUANT_OUT = {'A': 'tiny-v4-hub-fp8-mxfp4', 'B': 'tiny-v4-modelopt-nvfp4'}


# ----------------------------------------------------------------------------- torch side
torch = None


def setup_torch(threads):
    """Import torch and install the stable top-k rule exactly as make_v4_fixtures.py does."""
    global torch
    import torch as _torch
    torch = _torch
    torch.backends.cuda.matmul.allow_tf32 = False

    # Deterministic top-k: higher value first, equal values -> lower index (official and HF code use
    # torch.topk, whose tie order depends on row length; the tiny indexer produces exact 0.0 ties).
    _orig_topk = torch.topk  # noqa: F841 (kept as in the original)

    def _stable_topk(x, k, dim=-1, largest=True, sorted=True, out=None):
        idx = torch.sort(x, dim=dim, descending=largest, stable=True).indices.narrow(dim, 0, k)
        return torch.return_types.topk((x.gather(dim, idx), idx))
    torch.topk = _stable_topk
    torch.Tensor.topk = lambda self, k, dim=-1, largest=True, sorted=True: _stable_topk(self, k, dim, largest, sorted)
    torch.set_num_threads(threads)


def randomize(model, seed):
    """Verbatim from make_v4_fixtures.py."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or "layernorm" in n:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif n.endswith("sinks"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif n.endswith(".scale"):
                p.copy_(0.5 + 0.2 * torch.rand(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, generator=g))
            elif n.endswith("tid2eid"):
                E = model.config.n_routed_experts
                k = b.shape[1]
                rows = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(b.shape[0])])
                b.copy_(rows)


def round_to_bf16(model):
    """Round every saved floating tensor (parameters and persistent buffers) to a bf16 value, kept
    in float32. Non-persistent buffers (rotary inv_freq) are left alone."""
    saved = set(model.state_dict().keys())
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(p.to(torch.bfloat16).float())
        for n, b in model.named_buffers():
            if n in saved and b.is_floating_point():
                b.copy_(b.to(torch.bfloat16).float())


def greedy_nocache(model, ids, n):
    """Greedy tokens, and the smallest top-1 margin met on the way (how close a step is to a tie)."""
    ids = list(ids)
    out = []
    margin = float("inf")
    for _ in range(n):
        logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
        t = int(logits.argmax())
        top2 = logits.float().topk(2).values
        margin = min(margin, float(top2[0] - top2[1]))
        out.append(t)
        ids.append(t)
    return out, margin


def prefix_logits(model, seq):
    # Row t = last-position logits of a single no-cache forward over seq[:t+1] (make_v4_fixtures.py).
    return torch.stack([model(torch.tensor([seq[:t + 1]]), use_cache=False).logits[0, -1].float()
                        for t in range(len(seq))])


def write_oracle(model, d, prompts, new_tokens, extra=None, log=print):
    """make_v4_fixtures.make()'s reference loop: greedy (no cache), prefix rows, and HF's full
    forward and cached path compared with the rows."""
    res = {"prompts": [], "new_tokens": new_tokens, "greedy": [], "rows": [],
           "hf_full_forward_max_abs_diff": [], "hf_cached_max_abs_diff": []}
    with torch.no_grad():
        for i, pr in enumerate(prompts):
            greedy, margin = greedy_nocache(model, pr, new_tokens)
            for attempt in range(1, MARGIN_TRIES):
                if margin >= MIN_MARGIN:
                    break
                # a greedy step within MIN_MARGIN of a tie would make "greedy tokens exact" depend on
                # float noise: use another random prompt of the same length instead
                alt = prompts_for(1000 + 100 * attempt + i, [len(pr)], model.config.vocab_size)[0]
                log(" %s prompt %d: greedy margin %.3g < %g, replaced by another prompt of length %d"
                    % (os.path.basename(d), i, margin, MIN_MARGIN, len(pr)))
                res.setdefault("replaced_prompts", []).append({"index": i, "margin": margin, "old": pr})
                pr = alt
                greedy, margin = greedy_nocache(model, pr, new_tokens)
            res["prompts"].append(pr)
            fed = pr + greedy[:-1]
            ref = prefix_logits(model, fed)
            assert [int(x) for x in ref[len(pr) - 1:].argmax(-1)] == greedy
            ref.numpy().astype("<f4").tofile(os.path.join(d, f"logits_{i}.f32"))
            res["greedy"].append(greedy)
            res["rows"].append(len(fed))
            full = model(torch.tensor([fed]), use_cache=False).logits[0].float()
            res["hf_full_forward_max_abs_diff"].append([round(float(x), 6) for x in (full - ref).abs().max(-1).values])
            out = model(torch.tensor([pr]), use_cache=True)
            pkv = out.past_key_values
            rows = [out.logits[0]]
            for t in greedy[:-1]:
                out = model(torch.tensor([[t]]), past_key_values=pkv, use_cache=True)
                pkv = out.past_key_values
                rows.append(out.logits[0])
            cached = torch.cat(rows, 0).float()
            res["hf_cached_max_abs_diff"].append([round(float(x), 6) for x in (cached - ref).abs().max(-1).values])
            # smallest top-1 margin over the rows that pick greedy tokens (how far greedy is from a tie)
            top2 = ref[len(pr) - 1:].topk(2, dim=-1).values
            res.setdefault("min_greedy_margin", []).append(round(float((top2[:, 0] - top2[:, 1]).min()), 6))
    if extra:
        res.update(extra)
    with open(os.path.join(d, "oracle.json"), "w") as f:
        json.dump(res, f)
    for i in range(len(res["prompts"])):
        line = []
        for key in ("hf_full_forward_max_abs_diff", "hf_cached_max_abs_diff"):
            dd = res[key][i]
            bad = [k for k in range(len(dd)) if dd[k] > 1e-4]
            line.append("%s max %.2g rows>1e-4: %d %s" % (key[3:-13], max(dd), len(bad), bad[:8]))
        log(" %s prompt %d len %d rows %d | %s | min greedy margin %.3g"
            % (os.path.basename(d), i, len(res["prompts"][i]), res["rows"][i], " | ".join(line), res["min_greedy_margin"][i]))
    return res


def hf_model(cfg_kw, seed, log=print):
    """DeepseekV4ForCausalLM with make_v4_fixtures.py's randomisation. The compress YaRN parameters
    are passed nested (the form save_pretrained writes); should this transformers refuse that, they
    are passed flat (the legacy form its config folds into rope_parameters.compress)."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    kw = copy.deepcopy(cfg_kw)
    torch.manual_seed(seed)
    try:
        cfg = DeepseekV4Config(**kw)
        cfg._attn_implementation = "eager"
        model = DeepseekV4ForCausalLM(cfg).float().eval()
    except Exception as e:  # noqa: BLE001
        rp = kw.get("rope_parameters")
        if not rp or "compress" not in rp:
            raise
        log(" nested rope_parameters refused (%r); passing the compress YaRN parameters flat" % e)
        kw["rope_parameters"] = {k: v for k, v in rp["compress"].items() if k not in ("rope_theta", "partial_rotary_factor")}
        torch.manual_seed(seed)
        cfg = DeepseekV4Config(**kw)
        cfg._attn_implementation = "eager"
        model = DeepseekV4ForCausalLM(cfg).float().eval()
    if "rope_parameters" in cfg_kw:
        got = cfg.rope_parameters.get("compress", {})
        off = {k: (v, got.get(k)) for k, v in cfg_kw["rope_parameters"]["compress"].items() if got.get(k) != v}
        if off:
            log(" WARNING compress rope parameters differ from the request: %s" % off)
    randomize(model, seed)
    return model


def load_hf(d):
    from transformers import DeepseekV4ForCausalLM
    return DeepseekV4ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()


def check_rope(model, cfg_path, log):
    """The compress rope transformers built must be the official YaRN formula (v4_reference.inv_freqs)
    with no cos/sin scaling, and config.json must carry the YaRN parameters."""
    import v4_reference as ref
    c = json.load(open(cfg_path))
    rp = c["rope_parameters"]["compress"]
    log(" config.json rope_parameters: %s" % json.dumps(c["rope_parameters"]))
    if rp.get("rope_type") != "yarn":
        return "compress rope_type is %r, not yarn" % rp.get("rope_type")
    rd = int(c["head_dim"] * c["partial_rotary_factor"])
    want = ref.inv_freqs(rd, rp["rope_theta"], dict(original_seq_len=rp["original_max_position_embeddings"],
                                                     factor=rp["factor"], beta_fast=rp.get("beta_fast", 32),
                                                     beta_slow=rp.get("beta_slow", 1)))
    errs = []
    n = 0
    for name, mod in model.named_modules():
        if hasattr(mod, "compress_inv_freq"):
            n += 1
            got = [float(x) for x in mod.compress_inv_freq]
            rel = max(abs(a - b) / b for a, b in zip(got, want))
            sc = float(getattr(mod, "compress_attention_scaling", 1.0))
            if rel > 1e-6 or sc != 1.0 or len(got) != len(want):
                errs.append("%s: rel %.3g scaling %r" % (name, rel, sc))
    log(" yarn inv_freq (official formula): %s; %d rotary modules checked" % (["%.4g" % x for x in want], n))
    return "; ".join(errs) if errs or n == 0 else None


def make_hf_fixture(out, name, log):
    spec = FIXTURES[name]
    from transformers.activations import ACT2FN
    log("%s: transformers ACT2FN has softmax: %s, sigmoid: %s" % (name, "softmax" in ACT2FN, "sigmoid" in ACT2FN))
    d = os.path.join(out, name)
    seed = spec["seed"]
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model = hf_model(spec["cfg"], seed, log)
    extra = {"seed": seed}
    if spec["store"] == "bf16":
        round_to_bf16(model)
        want = model.state_dict()
        twin = hf_model(spec["cfg"], seed, log)   # same weights; cast to bf16 only for saving
        round_to_bf16(twin)
        twin.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
        del twin
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            hdr = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        dts = sorted({v["dtype"] for k, v in hdr.items() if k != "__metadata__"})
        log(" %s: stored dtypes %s, config dtype %r"
            % (name, dts, json.load(open(os.path.join(d, "config.json"))).get("dtype")))
        try:
            loaded = load_hf(d)
            got = loaded.state_dict()
            assert set(want) == set(got), set(want) ^ set(got)
            diff = max(float((want[k].float() - got[k].float()).abs().max()) for k in want)
            log(" %s: bf16 file loaded as float32 == rounded model: max diff %g, dtype %s"
                % (name, diff, loaded.dtype))
            assert diff == 0.0 and loaded.dtype == torch.float32
            model = loaded
            extra["loaded_from_bf16_file"] = True
        except Exception as e:  # noqa: BLE001
            log(" %s: WARNING from_pretrained check failed (%r); rows from the in-memory rounded model"
                % (name, e))
        extra["weights"] = "stored bf16; rows computed in float32 from exactly the stored bf16 values"
    else:
        model.save_pretrained(d, safe_serialization=True)
    problem = None
    if "rope_parameters" in spec["cfg"]:
        problem = check_rope(model, os.path.join(d, "config.json"), log)
        if problem:
            log(" %s: YaRN CHECK FAILED: %s" % (name, problem))
    res = write_oracle(model, d, spec["prompts"], NEW_TOKENS, extra, log)
    log("%s seed %d params %d, min greedy margin %.3g"
        % (name, seed, sum(p.numel() for p in model.parameters()), min(res["min_greedy_margin"])))
    return problem


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def make_quant(out, log, threads):
    """Float source (bf16-representable values, saved float32 by transformers) -> make_official.py ->
    rows from A_dequant_hf / B_dequant_hf -> committed fixture dirs."""
    work = os.path.join(out, "quant-work")
    src = os.path.join(work, "src_f32")
    os.makedirs(work, exist_ok=True)
    model = hf_model(QUANT["cfg"], QUANT["seed"], log)
    round_to_bf16(model)   # so the source travels losslessly as bf16 (see README)
    model.save_pretrained(src, safe_serialization=True)
    problem = check_rope(model, os.path.join(src, "config.json"), log)
    if problem:
        log(" quant source: YaRN CHECK FAILED: %s" % problem)
    # lossless bf16 copy of the source for the trip back (make_official.py can be re-run locally)
    from safetensors.torch import load_file, save_file
    sd = load_file(os.path.join(src, "model.safetensors"))   # the saved (DeepSeek) names
    for k, v in sd.items():
        if v.is_floating_point():
            assert torch.equal(v.to(torch.bfloat16).float(), v.float()), k
    sd = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in sd.items()}
    srcb = os.path.join(out, "quant-src-bf16")
    os.makedirs(srcb, exist_ok=True)
    save_file(sd, os.path.join(srcb, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(src, "config.json"), srcb)
    log("quant source params %d, saved in %s" % (sum(p.numel() for p in model.parameters()), src))
    t0 = time.time()
    cmd = [sys.executable, os.path.join(TOOLS, "make_official.py"), src, work, "--shards", "2", "--with-mtp"]
    log("run: " + " ".join(cmd))
    subprocess.run(cmd, check=True)
    log("make_official.py took %.1f s" % (time.time() - t0))
    hashes = {}
    for sub in ("A_official", "B_nvfp4", "A_dequant_hf", "B_dequant_hf"):
        for fn in sorted(os.listdir(os.path.join(work, sub))):
            p = os.path.join(work, sub, fn)
            if fn.endswith(".safetensors"):
                hashes["%s/%s" % (sub, fn)] = sha(p)
    json.dump(hashes, open(os.path.join(out, "quant-sha256.json"), "w"), indent=1)
    procs = []
    for key, deq, official in (("A", "A_dequant_hf", "A_official"), ("B", "B_dequant_hf", "B_nvfp4")):
        d = os.path.join(out, QUANT_OUT[key])
        if os.path.isdir(d):
            shutil.rmtree(d)
        shutil.copytree(os.path.join(work, official), d)
        os.remove(os.path.join(d, "manifest.json"))
        cmd = [sys.executable, os.path.abspath(__file__), "oracle", os.path.join(work, deq), d, key,
               "--threads", str(threads), "--source", src]
        procs.append((key, subprocess.Popen(cmd)))
    bad = [k for k, p in procs if p.wait() != 0]
    if bad:
        raise SystemExit("oracle failed for %s" % bad)
    return problem


def _ref_job(args):
    import check_reference as C
    ckpt, prompt, n = args
    return C.reference_generate(ckpt, prompt, n)


def reference_oracle(ckpt, d, prompts, new_tokens, extra, log):
    """Fallback when transformers cannot load CKPT: rows and greedy from tools/v4_reference.py
    (incremental decode, one process per prompt)."""
    import multiprocessing as mp
    from array import array
    with mp.Pool(len(prompts)) as pool:
        outs = pool.map(_ref_job, [(ckpt, p, new_tokens) for p in prompts])
    res = {"prompts": prompts, "new_tokens": new_tokens, "greedy": [], "rows": [],
           "rows_from": "tools/v4_reference.py incremental decode (transformers could not load the checkpoint)"}
    for i, (greedy, rows) in enumerate(outs):
        array("f", [v for r in rows for v in r]).tofile(open(os.path.join(d, "logits_%d.f32" % i), "wb"))
        res["greedy"].append(greedy)
        res["rows"].append(len(rows))
    res.update(extra)
    json.dump(res, open(os.path.join(d, "oracle.json"), "w"))
    log(" %s: rows from v4_reference.py for %d prompts" % (os.path.basename(d), len(prompts)))
    return res


def run_oracle(ckpt, d, key, source, log):
    extra = {"reference_checkpoint": "%s_dequant_hf: float32 copy of exactly the values a loader of this "
                                     "checkpoint gets after dequantisation (make_official.py)" % key}
    try:
        model = load_hf(ckpt)
    except Exception as e:  # noqa: BLE001
        log(" %s: WARNING transformers could not load %s (%r)" % (key, ckpt, e))
        reference_oracle(ckpt, d, QUANT["prompts"], NEW_TOKENS, extra, log)
        return
    res = write_oracle(model, d, QUANT["prompts"], NEW_TOKENS, extra, log)
    if source:   # how far quantisation moved the model: float source vs dequantised, full forward
        src = load_hf(source)
        agree, tot, mx = 0, 0, 0.0
        with torch.no_grad():
            for pr, g in zip(res["prompts"], res["greedy"]):
                fed = torch.tensor([pr + g[:-1]])
                a = model(fed, use_cache=False).logits[0]
                b = src(fed, use_cache=False).logits[0]
                agree += int((a.argmax(-1) == b.argmax(-1)).sum())
                tot += a.shape[0]
                mx = max(mx, float((a - b).abs().max()))
        res["float_source_vs_dequant"] = {"top1_agree_rows": agree, "rows": tot, "max_abs_logit_diff": round(mx, 5)}
        json.dump(res, open(os.path.join(d, "oracle.json"), "w"))
        log(" %s: float source vs dequantised: top-1 agrees on %d/%d rows, max |dlogit| %.3g" % (key, agree, tot, mx))


def pack(out, packdir, names, log):
    os.makedirs(packdir, exist_ok=True)
    for n in names:
        src = os.path.join(out, n)
        if not os.path.exists(src):
            log("pack: %s missing" % n)
            continue
        dst = os.path.join(packdir, n + ".tar.gz")
        with tarfile.open(dst, "w:gz") as t:
            t.add(src, arcname=n)
        log("packed %s (%d bytes)" % (dst, os.path.getsize(dst)))


def run_all(out, packdir, log):
    """Runs the three independent jobs as parallel processes; packs each result as it finishes."""
    os.makedirs(out, exist_ok=True)
    me = os.path.abspath(__file__)
    jobs = {n: subprocess.Popen([sys.executable, me, "hf", out, n, "--threads", "3"]) for n in FIXTURES}
    jobs["quant"] = subprocess.Popen([sys.executable, me, "quant", out, "--threads", "4"])
    status = {}
    while jobs:
        for n, p in list(jobs.items()):
            rc = p.poll()
            if rc is None:
                continue
            del jobs[n]
            status[n] = rc
            log("job %s exited %d" % (n, rc))
            if packdir:
                names = [n] if n in FIXTURES else list(QUANT_OUT.values()) + ["quant-src-bf16", "quant-sha256.json"]
                pack(out, packdir, names, log)
        time.sleep(0.5)
    return 0 if all(v == 0 for v in status.values()) else 1


def regen(srcb, work, sums, log):
    """Torch-free: widen the bf16 copy of the quantised fixtures' float source to float32 (exact) and
    re-run make_official.py, so A_dequant_hf / B_dequant_hf exist locally for check_reference.py;
    compares the results with the sha256 sums written on the machine that made the fixtures."""
    from array import array
    from stio import Tensor, load_dir, save_file
    T = load_dir(srcb)
    F = {}
    for k, t in T.items():
        if t.dtype == "BF16":
            h = array("H")
            h.frombytes(t.raw)
            t = Tensor("F32", t.shape, array("I", (x << 16 for x in h)).tobytes())
        F[k] = t
    src = os.path.join(work, "src_f32")
    os.makedirs(src, exist_ok=True)
    save_file(F, os.path.join(src, "model.safetensors"), {"format": "pt"})
    shutil.copy(os.path.join(srcb, "config.json"), src)
    subprocess.run([sys.executable, os.path.join(TOOLS, "make_official.py"), src, work, "--shards", "2",
                    "--with-mtp"], check=True)
    if sums:
        want = json.load(open(sums))
        bad = [k for k, v in want.items() if sha(os.path.join(work, k)) != v]
        log("regen: %d/%d files identical to the fixture machine's%s" % (len(want) - len(bad), len(want),
                                                                         (": differ " + str(bad)) if bad else ""))
        return 1 if bad else 0
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["all", "hf", "quant", "oracle", "configs", "regen"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--pack", default=None)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--source", default=None)
    a = ap.parse_args()

    def log(s):
        print(s, flush=True)
    if a.mode == "configs":
        print(json.dumps({"fixtures": FIXTURES, "quant": QUANT}, indent=1))
        return 0
    if a.mode == "all":
        return run_all(a.args[0], a.pack, log)
    if a.mode == "regen":
        return regen(a.args[0], a.args[1], a.args[2] if len(a.args) > 2 else None, log)
    setup_torch(a.threads)
    if a.mode == "hf":
        return 1 if make_hf_fixture(a.args[0], a.args[1], log) else 0
    if a.mode == "quant":
        return 1 if make_quant(a.args[0], log, a.threads) else 0
    if a.mode == "oracle":
        run_oracle(a.args[0], a.args[1], a.args[2], a.source, log)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch peer for the decode benchmark: Hugging Face transformers' DeepseekV4ForCausalLM, eager, on one GPU.

The model. A DeepseekV4ForCausalLM with V4-Flash's shapes (hidden 4096, 64 heads x 512, rope 64, q LoRA 1024,
8 output groups x 1024, window 128, 256 routed experts top-6 + 1 shared, inter 2048, indexer 64 x 128 top-512,
4 hyper-connection streams, vocabulary 129280), random weights, bf16 on the GPU, attn_implementation="eager",
transformers' default experts backend unless --experts names one, model.eval() under torch.inference_mode().
It is truncated to V4-Flash's first --layers layers (layers 0-1 sliding window only, then CSA (ratio 4) and HCA
(ratio 128) alternating, hash-routed MoE on layers 0-2); --ratios 4,128 picks the layer schedule instead (0 =
sliding window, 4 = CSA, 128 = HCA; layers 0-2 stay hash-routed). The hash layers' token -> expert table
(tid2eid, zeros after transformers' init) is filled with random distinct experts per token, so every MoE layer
routes near-uniformly as the synthetic model of sluice-bench does. RoPE of the compressed layers is plain RoPE
with compress_rope_theta, not YaRN: YaRN only changes the frequency table, not the work.

What is timed. For each batch the cache is filled with --context random tokens per sequence through
transformers' own cache (the DynamicCache the model creates, with its DeepSeek-V4 layers: sliding window,
compressor buffers, compressed entries, indexer keys), prefilling in chunks of at most --chunk tokens per
sequence and --chunk-tokens per forward, so eager attention's score tensors stay a few GB. Then decode steps
are timed: one random token per sequence through model(input_ids, past_key_values=cache), plus the argmax of
the logits, with CUDA events around each step; eager transformers synchronises with the host inside a step, so
the events hold those host gaps too. --warmup steps first, then the median of --reps steps. Each step extends
the context by one token (8192 -> 8199 over the default 7 steps).
--fill repeat prefills batch 1 once and builds every batch's cache by repeating that sequence along the batch
dimension (each tensor of each cache layer whose leading dimension is the batch): use it where prefilling at a
large batch takes too long or runs out of memory; the decode work is the same, the rows share one context.

ms_per_layer = (ms_per_step - head_ms) / layers, where head_ms is the head timed alone on the same batch
(median of as many calls): the final hyper-connection collapse (hc_head), the final RMSNorm, lm_head and the
argmax. The embedding lookup (one gather) stays in the layers' share.

Output: one line per row on stdout, "batch context ms_per_step ms_per_layer" ("OOM OOM" where the GPU ran out of
memory at that batch, "ERR ERR" for any other failure, with its traceback on stderr); progress on stderr, lines
starting with '#'. --out FILE writes the same as one JSON object, rewritten after every row:
{"gpu", "torch", "transformers", "layers", "rows": [{"batch", "context", "ms_per_step", "ms_per_layer", ...}], ...}.
Where torch, transformers or its DeepseekV4ForCausalLM is missing, or there is no GPU, it says so in one line and
exits 0 (with --out, the JSON then has "skipped" and no rows), so a bench run goes on without the peer.

--attention B:C,... also times one CSA layer's attention path alone the way plain PyTorch writes it, for a batch B
of rows at context C (before the model, needing only torch): bf16 tensors of V4-Flash's shapes (queries 64 x 512,
the indexer's queries 64 x 128 and head weights, C/4 index keys x 128 and compressed entries x 512, a window of 128
entries), then the indexer's scores (einsum, ReLU, head-weighted sum), topk(512), a gather of the selected entries,
the attention over window + selected (einsum, the sink in an fp32 softmax, einsum); the median of --reps x 4 calls
timed with CUDA events, into the JSON's "attention" rows {"batch", "context", "ms"}.

Usage: python3 bench/decode_peer.py [--layers 4 | --ratios 0,0,4,128] [--batches 1,16] [--context 8192]
       [--reps 5] [--warmup 2] [--chunk 1024] [--chunk-tokens 8192] [--fill prefill|repeat]
       [--experts default|eager|grouped_mm|batched_mm] [--attention B:C,...] [--out FILE] [--tiny] [--device cuda|cpu]
--tiny builds a small model of the same structure (hidden 256, 4 heads x 128, 16 experts top-2) to check the
script end to end in seconds: --tiny --context 1024 on the GPU, --tiny --device cpu --experts eager --context 512
on a CPU.
"""
import argparse
import contextlib
import copy
import gc
import json
import statistics
import sys
import time
import traceback

# V4-Flash's published shapes (shared/reference/v4_flash_config.json) under transformers' DeepseekV4Config names.
V4_FLASH = dict(
    vocab_size=129280, hidden_size=4096, moe_intermediate_size=2048, num_attention_heads=64, num_key_value_heads=1,
    head_dim=512, q_lora_rank=1024, num_experts_per_tok=6, n_routed_experts=256, n_shared_experts=1,
    scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5, rope_theta=10000.0,
    compress_rope_theta=160000.0, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=10.0,
    sliding_window=128, o_groups=8, o_lora_rank=1024, index_n_heads=64, index_head_dim=128, index_topk=512,
    num_nextn_predict_layers=0, partial_rotary_factor=64 / 512, rms_norm_eps=1e-6, tie_word_embeddings=False)
TINY = dict(V4_FLASH, vocab_size=1024, hidden_size=256, moe_intermediate_size=128, num_attention_heads=4,
            head_dim=128, q_lora_rank=128, num_experts_per_tok=2, n_routed_experts=16, o_groups=2, o_lora_rank=64,
            index_n_heads=4, index_head_dim=64, index_topk=16, sliding_window=16, partial_rotary_factor=0.25)
# Config fields that set the work; a transformers version that silently drops or renames one would time another
# model, so a mismatch stops the run.
SHAPE_FIELDS = ("vocab_size", "hidden_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
                "head_dim", "q_lora_rank", "num_experts_per_tok", "n_routed_experts", "o_groups", "o_lora_rank",
                "index_n_heads", "index_head_dim", "index_topk", "sliding_window", "hc_mult", "layer_types",
                "mlp_layer_types", "compress_rates")
RATIO_TYPE = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
N_HASH_LAYERS = 3  # V4-Flash's n_hash_layers
FLASH_LAYERS = 43


def log(msg):
    print("# " + msg, file=sys.stderr, flush=True)


def flash_ratio(i):
    """V4-Flash's compress ratio of layer i: 0, 0, then 4, 128, 4, ... (4 on even layers from 2)."""
    return 0 if i < 2 else (4 if i % 2 == 0 else 128)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=None, help="V4-Flash's first N layers (default 4)")
    ap.add_argument("--ratios", default=None, help="per-layer compress ratios (0, 4, 128) instead of --layers")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--context", type=int, default=8192, help="tokens per sequence in the cache before decoding")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=1024, help="most prefill tokens per sequence per forward")
    ap.add_argument("--chunk-tokens", type=int, default=8192, help="most prefill tokens per forward (batch x chunk)")
    ap.add_argument("--fill", choices=("prefill", "repeat"), default="prefill")
    ap.add_argument("--experts", choices=("default", "eager", "grouped_mm", "batched_mm"), default="default")
    ap.add_argument("--attention", default="", help="B:C,... rows of one CSA layer's attention path in PyTorch")
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a small model of the same structure (checks the script)")
    args = ap.parse_args()
    if args.ratios is not None:
        ratios = [int(x) for x in args.ratios.split(",") if x.strip()]
        if not ratios or any(r not in RATIO_TYPE for r in ratios):
            ap.error("--ratios takes a list of 0 (sliding window), 4 (CSA) and 128 (HCA)")
        if args.layers is not None and args.layers != len(ratios):
            ap.error("--layers %d does not match the %d entries of --ratios" % (args.layers, len(ratios)))
    else:
        n = 4 if args.layers is None else args.layers
        if not 1 <= n <= FLASH_LAYERS:
            ap.error("--layers must be 1..%d" % FLASH_LAYERS)
        ratios = [flash_ratio(i) for i in range(n)]
    args.ratios = ratios
    args.layers = len(ratios)
    args.batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if not args.batches or min(args.batches) < 1 or args.context < 1 or args.reps < 1 or args.warmup < 0:
        ap.error("batches, context and reps must be positive")
    try:
        args.attention = [tuple(int(v) for v in x.split(":")) for x in args.attention.split(",") if x.strip()]
    except ValueError:
        ap.error("--attention takes batch:context pairs, e.g. 64:8192,64:65536")
    if any(len(a) != 2 or a[0] < 1 or a[1] < 4 for a in args.attention):
        ap.error("--attention takes batch:context pairs with batch >= 1 and context >= 4")
    if args.chunk < 1 or args.chunk_tokens < 1:
        ap.error("--chunk and --chunk-tokens must be positive")
    return args


class Report:
    """The JSON result, rewritten after every row so that a run cut short keeps what it measured."""

    def __init__(self, args):
        self.path = args.out
        self.obj = {"gpu": None, "torch": None, "transformers": None, "layers": args.layers, "rows": [],
                    "ratios": args.ratios, "context": args.context, "reps": args.reps, "warmup": args.warmup,
                    "fill": args.fill, "command": " ".join(sys.argv),
                    "ms_per_layer_is": "(ms_per_step - head_ms) / layers; head = hc_head + final norm + lm_head + "
                                       "argmax, timed alone on the same batch"}

    def write(self):
        if self.path:
            with open(self.path, "w") as f:
                json.dump(self.obj, f, indent=1)
                f.write("\n")


def skip(report, why):
    """The peer cannot run here: one line, the JSON marked skipped, exit 0 so the bench run goes on."""
    print("decode_peer: skipped: " + why, file=sys.stderr, flush=True)
    report.obj["skipped"] = why
    report.write()
    sys.exit(0)


def build_config(Config, args):
    kw = dict(TINY if args.tiny else V4_FLASH)
    n = args.layers
    kw.update(num_hidden_layers=n, layer_types=[RATIO_TYPE[r] for r in args.ratios],
              mlp_layer_types=["hash_moe" if i < N_HASH_LAYERS else "moe" for i in range(n)],
              compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128})
    cfg = Config(**kw)
    cfg._attn_implementation = "eager"
    bad = []
    for k in SHAPE_FIELDS:
        have = getattr(cfg, k, "<missing>")
        if have != kw[k]:
            bad.append("%s=%r (config has %r)" % (k, kw[k], have))
    if bad:
        raise RuntimeError("DeepseekV4Config did not keep " + "; ".join(bad))
    return cfg


def build_model(torch, Model, cfg, dev):
    """Random init straight on the device in bf16 (V4-Flash at 4 layers is ~27 G parameters, ~54 GB in bf16)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        where = torch.device(dev) if dev.type != "cpu" else contextlib.nullcontext()
        with where:
            model = Model(cfg)
    finally:
        torch.set_default_dtype(old)
    model.to(dev)  # anything created outside the device context; a no-op for what is already there
    model.eval()
    return model


def randomize_hash_tables(torch, model, cfg, dev, seed):
    """tid2eid: random distinct experts per token id (transformers initialises it to zeros: every token on expert
    0, which would leave the hash layers' MoE nearly idle)."""
    g = torch.Generator(device=dev)
    g.manual_seed(seed + 1)
    n = 0
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("tid2eid"):
                k = buf.shape[-1]
                for lo in range(0, buf.shape[0], 16384):  # a bounded [rows, experts] temporary
                    hi = min(lo + 16384, buf.shape[0])
                    pick = torch.rand(hi - lo, cfg.n_routed_experts, device=dev, generator=g).argsort(dim=1)[:, :k]
                    buf[lo:hi].copy_(pick.to(buf.dtype))
                n += 1
    return n


def experts_backend(model):
    for get in (lambda: model.get_experts_implementation(), lambda: model.config._experts_implementation):
        try:
            v = get()
        except Exception:
            continue
        if v is not None:
            return v if isinstance(v, (str, dict)) else str(v)
    return None


def set_experts_backend(model, name):
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(name)
    else:
        model.config._experts_implementation = name


class Timer:
    """Milliseconds of one call: CUDA events on a GPU (the GPU timeline from before the call is issued to after
    its last kernel, host gaps included), the wall clock elsewhere."""

    def __init__(self, torch, dev):
        self.torch = torch
        self.cuda = dev.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def __call__(self, fn):
        self.sync()
        t0 = time.perf_counter()
        if self.cuda:
            a = self.torch.cuda.Event(enable_timing=True)
            b = self.torch.cuda.Event(enable_timing=True)
            a.record()
            r = fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b), (time.perf_counter() - t0) * 1e3, r
        r = fn()
        return (time.perf_counter() - t0) * 1e3, (time.perf_counter() - t0) * 1e3, r


def attention_row(torch, batch, context, dev, reps, seed, tiny):
    """One CSA layer's attention path (module docstring) at (batch, context): the median ms of reps calls."""
    H, hd, nI, dI, topk, W = (4, 128, 4, 32, 16, 16) if tiny else (64, 512, 64, 128, 512, 128)
    n = context // 4
    g = torch.Generator(device=dev).manual_seed(seed)
    bf = torch.bfloat16

    def rand(*shape):
        return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32).to(bf)

    q, q_i, w_i = rand(batch, H, hd), rand(batch, nI, dI), rand(batch, nI)
    keys_i, entries, window = rand(batch, n, dI), rand(batch, n, hd), rand(batch, W, hd)
    sink = torch.zeros(batch, H, 1, device=dev)
    scale = hd ** -0.5

    def path():
        s = torch.einsum("bhd,bnd->bhn", q_i, keys_i).relu_()
        score = torch.einsum("bhn,bh->bn", s, w_i)
        idx = score.topk(min(topk, n), dim=-1).indices
        sel = torch.gather(entries, 1, idx.unsqueeze(-1).expand(-1, -1, hd))
        kv = torch.cat([window, sel], 1)
        logits = torch.cat([torch.einsum("bhd,bkd->bhk", q, kv).float() * scale, sink], -1)
        p = logits.softmax(-1)[..., :-1].to(bf)
        return torch.einsum("bhk,bkd->bhd", p, kv)

    timer = Timer(torch, dev)
    for _ in range(3):
        path()
    return statistics.median(timer(path)[0] for _ in range(reps))


def chunk_len(args, batch):
    return max(1, min(args.chunk, args.chunk_tokens // batch, args.context))


def prefill(torch, model, batch, args, vocab, dev, gen):
    """The context through the model in chunks, the cache carried from one forward to the next; the first forward
    (no cache given, use_cache=True) makes the model create its own DynamicCache. logits_to_keep=1: no
    [batch, chunk, vocab] logits for tokens nobody samples."""
    c = chunk_len(args, batch)
    cache, done = None, 0
    while done < args.context:
        n = min(c, args.context - done)
        ids = torch.randint(0, vocab, (batch, n), device=dev, generator=gen)
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        del out, ids
        done += n
    return cache, c


def repeat_cache(torch, cache, batch):
    """A new cache holding `batch` copies of the batch-1 sequence in `cache` (left untouched): every tensor found
    in a cache layer's attributes (directly, or in a dict, list or tuple) whose leading dimension is 1 is repeated
    along it; tensors shared between attributes (the V4 layers keep values = keys) stay shared."""
    memo = {}

    def rep(v):
        if torch.is_tensor(v):
            if v.dim() == 0 or v.shape[0] != 1:
                return v
            if id(v) not in memo:
                memo[id(v)] = v.repeat((batch,) + (1,) * (v.dim() - 1))
            return memo[id(v)]
        if isinstance(v, dict):
            return {k: rep(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rep(x) for x in v]
        if isinstance(v, tuple):
            return tuple(rep(x) for x in v)
        return v

    new = copy.copy(cache)
    new.layers = []
    for layer in cache.layers:
        nl = copy.copy(layer)
        for k, v in list(vars(layer).items()):
            setattr(nl, k, rep(v))
        new.layers.append(nl)
    return new


def head_runner(torch, model, cfg, batch, dev):
    """The head on its own: hc_head (collapse of the hc_mult streams) + final norm + lm_head + argmax, on random
    [batch, 1, hc_mult, hidden] streams. Returns the callable and the parts found."""
    base = getattr(model, "model", None)
    hc_head = getattr(base, "hc_head", None) if base is not None else None
    norm = getattr(base, "norm", None) if base is not None else None
    lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if lm_head is None:
        lm_head = model.lm_head
    if hc_head is not None:
        x = torch.randn(batch, 1, cfg.hc_mult, cfg.hidden_size, device=dev, dtype=torch.bfloat16)
    else:
        x = torch.randn(batch, 1, cfg.hidden_size, device=dev, dtype=torch.bfloat16)

    def run():
        h = hc_head(x) if hc_head is not None else x
        if norm is not None:
            h = norm(h)
        return lm_head(h)[:, -1].argmax(-1)

    parts = [p for p, m in (("hc_head", hc_head), ("norm", norm), ("lm_head", lm_head)) if m is not None]
    return run, parts


def is_oom(torch, e):
    t = getattr(torch.cuda, "OutOfMemoryError", None)
    return (t is not None and isinstance(e, t)) or "out of memory" in str(e).lower()


def free(torch, dev):
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def measure_row(torch, model, cfg, args, batch, dev, timer, base_cache):
    """One row: fill the cache, time decode steps and the head. Returns the row's fields."""
    vocab = cfg.vocab_size
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed * 1000003 + batch)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    if args.fill == "repeat":
        cache, chunk = repeat_cache(torch, base_cache, batch), None
    else:
        cache, chunk = prefill(torch, model, batch, args, vocab, dev, gen)
    timer.sync()
    fill_s = time.perf_counter() - t0
    seen = cache.get_seq_length() if hasattr(cache, "get_seq_length") else None
    log("batch %d: cache filled to %s tokens in %.1f s (%s%s)" % (
        batch, seen, fill_s, args.fill, "" if chunk is None else ", chunks of %d" % chunk))
    if seen is not None and seen != args.context:
        log("batch %d: the cache reports %s tokens after filling %d" % (batch, seen, args.context))

    toks = torch.randint(0, vocab, (args.warmup + args.reps, batch, 1), device=dev, generator=gen)
    last = {}

    def step(i):
        def run():
            logits = model(input_ids=toks[i], past_key_values=cache, use_cache=True).logits
            last["logits"] = logits
            return logits[:, -1].argmax(-1)
        return run

    step_ms, step_wall = [], []
    for i in range(args.warmup + args.reps):
        ev, wall, _ = timer(step(i))
        if i >= args.warmup:
            step_ms.append(ev)
            step_wall.append(wall)
    finite = bool(torch.isfinite(last["logits"].float()).all().item())
    del last["logits"]

    run_head, parts = head_runner(torch, model, cfg, batch, dev)
    head_ms = []
    for i in range(args.warmup + args.reps):
        ev, _, _ = timer(run_head)
        if i >= args.warmup:
            head_ms.append(ev)

    ms = statistics.median(step_ms)
    hm = statistics.median(head_ms)
    row = {"batch": batch, "context": args.context,
           "ms_per_step": round(ms, 4), "ms_per_layer": round((ms - hm) / args.layers, 4),
           "head_ms": round(hm, 4), "head": "+".join(parts), "step_ms_all": [round(x, 4) for x in step_ms],
           "wall_ms_per_step": round(statistics.median(step_wall), 4), "fill": args.fill,
           "fill_s": round(fill_s, 2), "prefill_chunk": chunk, "logits_finite": finite}
    if dev.type == "cuda":
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if not finite:
        log("batch %d: the logits hold inf/nan (random weights); the timing stands, the routing may be skewed" % batch)
    return row


def main():
    args = parse_args()
    report = Report(args)
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any failure to import means no peer here
        skip(report, "torch cannot be imported (%s: %s)" % (type(e).__name__, e))
    report.obj["torch"] = torch.__version__
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            skip(report, "no CUDA device for torch %s" % torch.__version__)
        dev = torch.device("cuda", torch.cuda.current_device())
        report.obj["gpu"] = torch.cuda.get_device_name(dev)
    else:
        report.obj["gpu"] = None
        report.obj["device"] = str(dev)
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)
    if args.attention:
        report.obj["attention"] = []
        print("# attention: batch context ms", flush=True)
    with torch.inference_mode():
        for batch, context in args.attention:
            try:
                ms = attention_row(torch, batch, context, dev, 4 * args.reps, args.seed, args.tiny)
            except Exception as e:  # noqa: BLE001 - a failed row is reported, the next one runs
                print("%d %d %s" % (batch, context, "OOM" if is_oom(torch, e) else "ERR"), flush=True)
                log("attention %d:%d: %s: %s" % (batch, context, type(e).__name__, e))
                free(torch, dev)
                continue
            print("%d %d %.4f" % (batch, context, ms), flush=True)
            report.obj["attention"].append({"batch": batch, "context": context, "ms": ms})
            report.write()
            free(torch, dev)

    try:
        import transformers
    except Exception as e:  # noqa: BLE001
        skip(report, "transformers cannot be imported (%s: %s)" % (type(e).__name__, e))
    report.obj["transformers"] = transformers.__version__
    try:
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    except Exception as e:  # noqa: BLE001
        skip(report, "transformers %s has no DeepseekV4ForCausalLM (%s: %s)" % (
            transformers.__version__, type(e).__name__, e))
    cfg = build_config(DeepseekV4Config, args)
    model = build_model(torch, DeepseekV4ForCausalLM, cfg, dev)
    if args.experts != "default":
        set_experts_backend(model, args.experts)
    n_hash = randomize_hash_tables(torch, model, cfg, dev, args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
    report.obj.update({
        "model": "tiny" if args.tiny else "v4-flash", "layer_types": list(cfg.layer_types),
        "mlp_layer_types": list(getattr(cfg, "mlp_layer_types", []) or []),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "experts_implementation": experts_backend(model), "param_dtypes": dtypes,
        "params": n_params, "param_gib": round(n_bytes / 2**30, 2)})
    log("%s: DeepseekV4ForCausalLM, %d layers %s, %.2f G parameters (%.1f GiB, %s), attention %s, experts %s, "
        "%d hash tables randomised; built in %.1f s" % (
            report.obj["gpu"] or str(dev), args.layers, args.ratios, n_params / 1e9, n_bytes / 2**30,
            "/".join(dtypes), report.obj["attn_implementation"], report.obj["experts_implementation"], n_hash,
            time.perf_counter() - t_start))
    report.write()

    timer = Timer(torch, dev)
    print("# batch context ms_per_step ms_per_layer", flush=True)
    with torch.inference_mode():
        base_cache = None
        if args.fill == "repeat":
            t0 = time.perf_counter()
            base_cache, c = prefill(torch, model, 1, args, cfg.vocab_size, dev,
                                    torch.Generator(device=dev).manual_seed(args.seed))
            timer.sync()
            log("batch-1 cache to repeat: %d tokens in chunks of %d, %.1f s" % (args.context, c,
                                                                                time.perf_counter() - t0))
        for batch in args.batches:
            row, status, why = None, None, None
            try:
                row = measure_row(torch, model, cfg, args, batch, dev, timer, base_cache)
            except Exception as e:  # noqa: BLE001 - a failed row is reported, the next one runs
                status = "OOM" if is_oom(torch, e) else "ERR"
                why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                if status == "ERR":
                    traceback.print_exc(file=sys.stderr)
            free(torch, dev)
            if row is None:
                row = {"batch": batch, "context": args.context, "ms_per_step": None, "ms_per_layer": None,
                       "status": status.lower(), "error": why}
                print("%d %d %s %s" % (batch, args.context, status, status), flush=True)
                log("batch %d: %s" % (batch, why))
            else:
                print("%d %d %.4f %.4f" % (batch, args.context, row["ms_per_step"], row["ms_per_layer"]),
                      flush=True)
                log("batch %d: step %.3f ms (head %.3f ms), %.3f ms per layer, peak %s GiB" % (
                    batch, row["ms_per_step"], row["head_ms"], row["ms_per_layer"], row.get("peak_gib")))
            report.obj["rows"].append(row)
            report.write()
        base_cache = None
    report.obj["total_s"] = round(time.perf_counter() - t_start, 1)
    report.write()
    log("done in %.1f s" % report.obj["total_s"])
    if not any(r.get("ms_per_step") is not None for r in report.obj["rows"]):
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch peer for `sluice-bench moe`: one V4-Flash MoE layer with torch._grouped_mm in bf16.

Same shape and routing as the bench (256 experts, hidden 4096, inter 2048, top-6 + 1 shared
expert, sqrtsoftplus router in fp32, swiglu clamp 10; "skewed" = every token on experts 0..5).
Router, sort by expert, grouped gate/up GEMM, SwiGLU, grouped down GEMM, weighted scatter-add and
the dense shared expert, captured in a CUDA graph when possible; median of replays rotating among
8 input sets. Prints and writes lines "batch routing ms ms_queued" (v25: the second time with each replay
queued behind a spin; sluice-bench --peer reads both).
Usage: python3 bench/moe_peer.py [--out FILE] [--batches 1,4,...]
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

E, H, I, K, LIMIT, SCALE = 256, 4096, 2048, 6, 10.0, 1.5
# v25: the second column times the same replays each queued behind torch.cuda._sleep (~100 us at ~2 GHz), so
# the event pair holds no host launch gap (sluice-bench's ms_queued); the first is the replays launched onto an
# idle stream, as every peer run before v25.
HOLD_CYCLES = 200_000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--batches", default="1,4,8,16,32,64,128,256,512")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    # expert weights: [E, N, K] stored, used transposed (column-major B, what _grouped_mm wants)
    w13 = (torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16) * 0.02)
    w2 = (torch.randn(E, H, I, device=dev, dtype=torch.bfloat16) * 0.02)
    ws13 = torch.randn(2 * I, H, device=dev, dtype=torch.bfloat16) * 0.02
    ws2 = torch.randn(H, I, device=dev, dtype=torch.bfloat16) * 0.02
    gate = torch.randn(E, H, device=dev, dtype=torch.float32) * 0.015
    bias_rand = torch.zeros(E, device=dev)
    bias_skew = torch.zeros(E, device=dev)
    bias_skew[:K] = 100.0
    w13t, w2t = w13.transpose(-2, -1), w2.transpose(-2, -1)

    def layer(x, bias):
        T = x.shape[0]
        logits = x.float() @ gate.t()
        scores = F.softplus(logits).sqrt()
        idx = torch.topk(scores + bias, K, dim=-1, sorted=False).indices
        wts = scores.gather(1, idx)
        wts = wts / wts.sum(-1, keepdim=True) * SCALE
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.zeros(E, device=dev, dtype=torch.int64).index_add_(0, flat, torch.ones_like(flat))
        offs = torch.cumsum(counts, 0).to(torch.int32)
        tok = order // K
        xs = x[tok]
        gu = torch._grouped_mm(xs, w13t, offs=offs)
        g, u = gu[:, :I], gu[:, I:]
        h = F.silu(g.clamp(max=LIMIT)) * u.clamp(-LIMIT, LIMIT)
        h = h * wts.reshape(-1)[order].unsqueeze(1).to(h.dtype)
        y = torch._grouped_mm(h, w2t, offs=offs)
        out = torch.zeros(T, H, device=dev, dtype=torch.float32)
        out.index_add_(0, tok, y.float())
        sgu = x @ ws13.t()
        sh = F.silu(sgu[:, :I].clamp(max=LIMIT)) * sgu[:, I:].clamp(-LIMIT, LIMIT)
        return out + (sh @ ws2.t()).float()

    lines = []
    for routing, bias in (("random", bias_rand), ("skewed", bias_skew)):
        for T in [int(b) for b in args.batches.split(",")]:
            xs = [torch.rand(T, H, device=dev, dtype=torch.bfloat16) * 4 - 2 for _ in range(8)]
            for x in xs:
                layer(x, bias)
            torch.cuda.synchronize()
            runs = []
            try:
                graphs = []
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for x in xs:
                        layer(x, bias)
                torch.cuda.current_stream().wait_stream(s)
                for x in xs:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        layer(x, bias)
                    graphs.append(g)
                runs = [g.replay for g in graphs]
                mode = "graph"
            except Exception as e:  # data-dependent ops that refuse capture: time eager
                print(f"# graph capture failed ({type(e).__name__}: {e}); timing eager", file=sys.stderr)
                runs = [(lambda x=x: layer(x, bias)) for x in xs]
                mode = "eager"
            def timed(hold):
                times = []
                for r in range(args.reps * len(runs)):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    if hold:  # the replay queued behind a spin, as sluice-bench times its own (v25)
                        torch.cuda._sleep(HOLD_CYCLES)
                    a.record()
                    runs[r % len(runs)]()
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b))
                return statistics.median(times)

            ms, msq = timed(False), timed(True)
            line = f"{T} {routing} {ms:.5f} {msq:.5f}"
            print(line, f"# {mode}", flush=True)
            lines.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# batch routing ms ms_queued  (torch %s, torch._grouped_mm bf16)\n" % torch.__version__)
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch peer for `sluice-bench moe`: one V4-Flash MoE layer with torch._grouped_mm in bf16.

Same shape and routing as the bench (256 experts, hidden 4096, inter 2048, top-6 + 1 shared
expert, sqrtsoftplus router in fp32, swiglu clamp 10; "skewed" = every token on experts 0..5).
Router, sort by expert, grouped gate/up GEMM, SwiGLU, grouped down GEMM, weighted scatter-add and
the dense shared expert, captured in a CUDA graph when possible; median of replays rotating among
8 input sets. Prints and writes lines "batch routing ms ms_queued" (v25: the second time with each replay
queued behind a spin; sluice-bench --peer reads both).
v42: --power MS also replays each row's graphs back to back for MS ms between two reads of NVML's board energy
counter (libnvidia-ml through ctypes), as `sluice-bench moe --power` does, and prints the sustained time per replay,
the board's watts and the joules per replay.
Usage: python3 bench/moe_peer.py [--out FILE] [--batches 1,4,...] [--power MS]
"""
import argparse
import ctypes
import statistics
import sys
import time

import torch
import torch.nn.functional as F

E, H, I, K, LIMIT, SCALE = 256, 4096, 2048, 6, 10.0, 1.5
# v25: the second column times the same replays each queued behind torch.cuda._sleep (~100 us at ~2 GHz), so
# the event pair holds no host launch gap (sluice-bench's ms_queued); the first is the replays launched onto an
# idle stream, as every peer run before v25.
HOLD_CYCLES = 200_000


class Nvml:
    """The board energy counter (mJ) of the GPU torch uses, through libnvidia-ml (ships with the driver)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.dev = ctypes.c_void_p()
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        bus = (f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
               if all(hasattr(p, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")) else None)
        if bus is None or self.lib.nvmlDeviceGetHandleByPciBusId_v2(bus.encode(), ctypes.byref(self.dev)) != 0:
            if self.lib.nvmlDeviceGetHandleByIndex_v2(torch.cuda.current_device(), ctypes.byref(self.dev)) != 0:
                raise RuntimeError("no NVML handle for the CUDA device")
        self.mj()

    def mj(self):
        e = ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetTotalEnergyConsumption(self.dev, ctypes.byref(e)) != 0:
            raise RuntimeError("nvmlDeviceGetTotalEnergyConsumption failed")
        return e.value


def power_run(nv, runs, ms):
    """runs back to back (one group of len(runs) queued ahead of the one waited on) for ms milliseconds: (replays,
    seconds, ms per replay by events, watts, joules per replay)."""
    torch.cuda.synchronize()
    j0, t0 = nv.mj(), time.monotonic()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    n, prev = 0, None
    while True:
        for r in runs:
            r()
        n += len(runs)
        ev = torch.cuda.Event()
        ev.record()
        if prev is not None:
            prev.synchronize()
        prev = ev
        if (time.monotonic() - t0) * 1e3 >= ms:
            break
    b.record()
    b.synchronize()
    s = time.monotonic() - t0
    j = (nv.mj() - j0) * 1e-3
    return n, s, a.elapsed_time(b) / n, j / s, j / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--batches", default="1,4,8,16,32,64,128,256,512")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--power", type=int, default=0, help="ms of back-to-back replays per row under NVML's energy counter")
    args = ap.parse_args()
    dev = torch.device("cuda")
    nv = Nvml() if args.power > 0 else None
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
            if nv is not None:
                n, sec, msp, w, jr = power_run(nv, runs, args.power)
                print(f"# power {T} {routing}: {n} replays in {sec:.2f} s, {msp:.4f} ms each, {w:.0f} W, {jr:.4f} J per replay",
                      flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# batch routing ms ms_queued  (torch %s, torch._grouped_mm bf16)\n" % torch.__version__)
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Model check of XB's shared-memory activation stage (kernels/sm90/moe_expert_dev.cuh, fp4_rowtile_xb): the
block's 4 warps each run the step sequence of xb_prime / fp4_rowtile_xb on one continuous chunk counter g, with
XB_S slots and a full and an empty mbarrier per slot (one arrival per warp here; per thread in the kernel, where
all 32 lanes of a warp arrive together). Random interleavings of the warps, fresh each run; the check fails on a
deadlock (no warp can move), on a read of a slot that does not hold all four quarters of the chunk the reader
expects (a slot overwritten too early or read too soon), or on a parity wait that would pass for the wrong phase.

mbarrier semantics modelled: a phase completes when its W arrivals are in; try_wait.parity(k & 1) passes once
phase k has completed and the barrier has not completed phase k + 1 as well (the kernel must never let a barrier
run two phases ahead of a waiter: this model fails if that could happen).
    python3 tests/kernels/xb_protocol.py [schedules per length]
"""
import random
import sys

XB_S = 3   # as kernels/sm90/moe_expert_dev.cuh


def warp_program(n):
    """One warp's operations on chunks 0..n-1, in the kernel's order."""
    yield ("load", 0)            # xb_prime: chunk 0 ...
    yield ("store", 0)           # ... stored (its slot's first use: no empty wait)
    yield ("load", 1)            # ... and chunk 1 in registers
    have = True
    for g in range(n):
        if have:                 # step g: store chunk g + 1 (loaded one step ago) once its slot is free
            yield ("store", g + 1)
            have = False
        if g + 2 < n:            # load chunk g + 2 (this item's or the next item's)
            yield ("load", g + 2)
            have = True
        yield ("wait_full", g)
        yield ("read", g)
        yield ("arrive_empty", g)


def run(n, rnd, warps=4):
    slot = [None] * XB_S                       # (chunk, set of warps whose quarter is in)
    full = [[0, 0] for _ in range(XB_S)]      # [completed phases, arrivals in the current one]
    empty = [[0, 0] for _ in range(XB_S)]

    def arrive(b):
        b[1] += 1
        if b[1] == warps:
            b[0], b[1] = b[0] + 1, 0

    def passed(b, k):                          # try_wait.parity(k & 1) for phase k
        if b[0] >= k + 2:
            raise AssertionError("a barrier ran two phases ahead of a waiter")
        return b[0] == k + 1

    progs = [warp_program(n) for _ in range(warps)]
    cur = [next(p) for p in progs]
    reg = [None] * warps
    live = set(range(warps))
    while live:
        ready = []
        for w in live:
            op, g = cur[w]
            if op == "store" and g // XB_S > 0 and not passed(empty[g % XB_S], g // XB_S - 1):
                continue
            if op == "wait_full" and not passed(full[g % XB_S], g // XB_S):
                continue
            ready.append(w)
        if not ready:
            raise AssertionError(f"deadlock at {[cur[w] for w in sorted(live)]}")
        w = rnd.choice(ready)
        op, g = cur[w]
        s = g % XB_S
        if op == "load":
            reg[w] = g
        elif op == "store":
            assert reg[w] == g
            if slot[s] is None or slot[s][0] != g:
                assert slot[s] is None or len(slot[s][1]) == warps, "slot overwritten before it was complete"
                slot[s] = (g, set())
            slot[s][1].add(w)
            arrive(full[s])
        elif op == "read":
            assert slot[s] is not None and slot[s][0] == g and len(slot[s][1]) == warps, f"warp {w} read chunk {g}: {slot[s]}"
        elif op == "arrive_empty":
            arrive(empty[s])
        try:
            cur[w] = next(progs[w])
        except StopIteration:
            live.discard(w)


def main():
    per = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rnd = random.Random()
    for n in (2, 3, 4, 5, 7, 16, 33):
        for _ in range(per):
            run(n, rnd)
    print(f"xb_protocol: {7 * per} random schedules of 2-33 chunks: no deadlock, no early overwrite or read")
    return 0


if __name__ == "__main__":
    sys.exit(main())

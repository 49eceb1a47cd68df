#!/usr/bin/env python3
"""fp4_layout_search.py - the search behind the FP4 dequantisation of kernels/common/moe_fp4_common.cuh.

One 32-bit repacked word holds 8 FP4 codes. The kernel turns it into 4 bf16x2 pairs. A pair is valid
when its bits sit at positions M = {6,7,8,15,22,23,24,31}: exponent LSBs, top mantissa bit and sign of
each 16-bit lane. The repacker may put each stored bit anywhere, so the question is which word ops can
cover all 32 bits with 4 such windows at the lowest cost in integer-pipe (ALU) instructions.

Ops, and the pipe each uses:
  raw & M                    1 ALU
  rotr(w, k) & M             2 ALU (SHF.R.W + LOP3)
  (w << k) & M               1 ALU + 1 IMAD (IMAD.SHL), only where no needed bit falls off
  ((w & L) * K) & M          2 ALU + 1 IMAD: K has several set bits, so one multiply moves every
                             masked bit by its own shift. It is exact when no two shifted copies
                             land on the same position (then there are no carries).

Searches:
  1. three pairs as views (raw / shift / rotate) plus one pair by the multiply;
  2. one or two views plus two or three pairs that share one pre-mask L (1 ALU for the group).
Result: the best is 7 ALU + 1 IMAD per word (the kernels' layout: rotations 0, 3, 6 and pair 3 =
((w & 0x001B001B) * 0x4108) & M); nothing has 6 ALU or fewer.
The script also checks the chosen layout (moe_fp4_bitpos) and the scale-code byte order
(moe_fp4_scale_byte) on random inputs. Run: python3 bench/fp4_layout_search.py (~10 s).
"""
import itertools
import random

M = [6, 7, 8, 15, 22, 23, 24, 31]
MSET = set(M)
MASK = 0x81C081C0


def views():
    """(name, alu, imad, source bit of output bit i or None)"""
    out = [("raw", 0, 0, lambda i: i)]
    for k in range(1, 32):
        out.append(("shl%d" % k, 0, 1, (lambda k: lambda i: i - k if i >= k else None)(k)))
        out.append(("rot%d" % k, 1, 0, (lambda k: lambda i: (i + k) % 32)(k)))
    return out


def clean_windows():
    """Each view masked to M: (name, alu, imad, set of stored bits it consumes)."""
    res = []
    for name, alu, imad, src in views():
        s = [src(i) for i in M]
        if None not in s:
            res.append((name, alu + 1, imad, frozenset(s)))
    return res


def multiply_terms(bits, targets_needed=True):
    """Term sets K (shifts) for which ((w & bits) * sum 2^t) & M lands exactly one stored bit on every
    position of M without carries. Yields (terms, stored bits landing on M)."""
    bits = sorted(bits)
    for nt in (1, 2, 3):
        for ts in itertools.combinations(range(32), nt):
            pos = {}
            ok = True
            for b in bits:
                for t in ts:
                    p = b + t
                    if p >= 32:
                        continue
                    if p in pos:
                        ok = False
                        break
                    pos[p] = b
                if not ok:
                    break
            if ok and all(m in pos for m in M):
                yield ts, frozenset(pos[m] for m in M)


def search_one_multiply(clean, max_alu):
    best = []
    for c3 in itertools.combinations(clean, 3):
        s = [c[3] for c in c3]
        if s[0] & s[1] or s[0] & s[2] or s[1] & s[2]:
            continue
        alu = sum(c[1] for c in c3) + 2
        if alu > max_alu:
            continue
        left = frozenset(range(32)).difference(*s)
        for ts, got in multiply_terms(left):
            if got == left:
                best.append((alu, sum(c[2] for c in c3) + 1, [c[0] for c in c3], ts))
                break
    return sorted(best)


def search_groups(clean, max_alu):
    found = []
    for nclean in (1, 2):
        for cs in itertools.combinations(clean, nclean):
            s = [c[3] for c in cs]
            if any(s[i] & s[j] for i in range(len(s)) for j in range(i + 1, len(s))):
                continue
            g = 4 - nclean
            alu = sum(c[1] for c in cs) + 1 + g   # one shared pre-mask, one final mask per member
            if alu > max_alu:
                continue
            left = frozenset(range(32)).difference(*s)
            cands = list(multiply_terms(left))
            for combo in itertools.combinations(cands, g):
                got = [c[1] for c in combo]
                if sum(len(x) for x in got) == len(left) and frozenset().union(*got) == left:
                    found.append((alu, [c[0] for c in cs], [c[0] for c in combo]))
                    break
    return found


def bitpos(j, lane, b):
    """moe_fp4_bitpos (the layout the kernels use)"""
    o = (15 if b == 3 else 6 + b) + 16 * lane
    if j < 3:
        return (o + 3 * j) & 31
    return (b + 3 if b < 2 else b - 2) + 16 * lane


def rotr(w, s):
    return ((w >> s) | (w << (32 - s))) & 0xFFFFFFFF


def check_chosen(n=20000):
    assert sorted(bitpos(j, l, b) for j in range(4) for l in range(2) for b in range(4)) == list(range(32))
    rng = random.Random(1)
    for _ in range(n):
        nib = [[rng.randrange(16) for _ in range(2)] for _ in range(4)]
        w = 0
        for j in range(4):
            for l in range(2):
                for b in range(4):
                    if nib[j][l] >> b & 1:
                        w |= 1 << bitpos(j, l, b)
        p = [w & MASK, rotr(w, 3) & MASK, rotr(w, 6) & MASK, (((w & 0x001B001B) * 0x4108) & 0xFFFFFFFF) & MASK]
        for j in range(4):
            for l in range(2):
                v = nib[j][l]
                want = (v & 1) << 6 | (v >> 1 & 1) << 7 | (v >> 2 & 1) << 8 | (v >> 3 & 1) << 15
                assert (p[j] >> 16 * l) & 0xFFFF == want
    for _ in range(2000):   # scale codes: one shift + mask + OR gives rows g / g+8 in the two lanes
        codes = [[rng.randrange(256) for _ in range(4)] for _ in range(2)]
        by = [0] * 8
        for hi in range(2):
            for ug in range(4):
                by[(ug >> 1) * 4 + hi * 2 + (ug & 1)] = codes[hi][ug]
        sx = int.from_bytes(bytes(by[:4]), "little")
        sy = int.from_bytes(bytes(by[4:]), "little")
        for ug in range(4):
            s = sx if ug < 2 else sy
            f = ((((s >> 4) if ug & 1 else (s << 4)) & 0xFFFFFFFF) & 0x0FF00FF0) | (192 << 7) * 0x10001
            for hi in range(2):
                assert (f >> 16 * hi) & 0xFFFF == codes[hi][ug] * 16 + (192 << 7)


def main():
    clean = clean_windows()
    one = search_one_multiply(clean, 8)
    print("three views + one multiplied pair, ALU <= 8 per word: %d layouts" % len(one))
    for r in one[:4]:
        print("  ALU %d, IMAD %d: views %s, multiply terms %s" % r)
    print("best ALU with one multiplied pair: %d" % (one[0][0] if one else -1))
    grp = search_groups(clean, 6)
    print("views + pairs sharing one pre-mask, ALU <= 6: %d layouts" % len(grp))
    check_chosen()
    print("chosen layout (rotations 0, 3, 6; pair 3 = ((w & 0x001B001B) * 0x4108) & M) and scale bytes: ok")


if __name__ == "__main__":
    main()

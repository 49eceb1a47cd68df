#!/usr/bin/env python3
"""Decodes every tensor of a hub-format (FP8 + MXFP4) or ModelOpt NVFP4 fixture with the codecs in
tools/fpcodec.py and compares it bit for bit with the float32 dequantised copy the fixture's
reference rows were computed from (A_dequant_hf / B_dequant_hf, transformers naming; re-made by
`make_fixtures.py regen`). This is what a loader must reproduce.
Usage: python3 check_dequant.py FIXTURE_DIR DEQUANT_DIR
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tools'))
import fpcodec as fc  # noqa: E402
from make_official import official_name, storage_kind  # noqa: E402
from stio import load_dir  # noqa: E402


def decode(T, on):
    t = T[on]
    rows, cols = (t.shape + [1])[:2] if len(t.shape) < 2 else t.shape
    base = on[:-len('.weight')] if on.endswith('.weight') else on
    if t.dtype == 'F8_E4M3':
        return 'fp8', fc.dequant_fp8_block(t.raw, T[base + '.scale'].raw, rows, cols)
    if t.dtype == 'I8':
        return 'mxfp4', fc.dequant_mxfp4(t.raw, T[base + '.scale'].raw, rows, cols * 2)
    if t.dtype == 'U8':
        ws2 = struct.unpack('<f', T[base + '.weight_scale_2'].raw)[0]
        return 'nvfp4', fc.dequant_nvfp4(t.raw, T[base + '.weight_scale'].raw, ws2, rows, cols * 2)
    if t.dtype in ('F32', 'BF16'):
        return t.dtype.lower(), t.floats()
    if t.dtype in ('I64', 'I32'):
        return 'int', t.floats()
    raise ValueError('%s: dtype %s' % (on, t.dtype))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    T = load_dir(sys.argv[1])
    D = load_dir(sys.argv[2])
    counts, bad = {}, []
    for hf in sorted(D):
        on = official_name(hf)
        if on not in T:
            bad.append('%s (-> %s) missing' % (hf, on))
            continue
        kind, vals = decode(T, on)
        want = D[hf].floats()
        same = len(vals) == len(want) and all(a == b or (a != a and b != b) for a, b in zip(vals, want))
        counts[kind] = counts.get(kind, 0) + 1
        if not same:
            bad.append('%s (%s, %s)' % (on, kind, storage_kind(on)))
    extra = sorted(k for k in T if k.startswith('mtp.') and k.endswith('.weight'))
    print('%s: %d tensors decoded %s; identical to %s: %s; mtp.* weights present (not in the reference): %d'
          % (os.path.basename(os.path.normpath(sys.argv[1])), sum(counts.values()), counts,
             os.path.basename(os.path.normpath(sys.argv[2])), 'all' if not bad else 'NO', len(extra)))
    for b in bad[:20]:
        print('  differs:', b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Checks a fixture's logits_i.f32 rows against the independent pure-Python reference
(tools/v4_reference.py, a copy of ../shared/reference/v4_reference.py), token by token.

v4_reference.py reads one F32 model.safetensors in transformers naming and always scores the
router with sqrtsoftplus; this wrapper adds, without changing its maths elsewhere:
  - BF16 tensors (widened exactly to float32) and sharded transformers checkpoints,
  - config `scoring_func` sigmoid (DeepSeek renormalises the top-k weights for sigmoid and
    sqrtsoftplus; softmax is refused: DeepSeek does not renormalise softmax weights, while
    transformers always does, so no transformers-made fixture can use it).
Usage: python3 check_reference.py FIXTURE_DIR [--ckpt CKPT_DIR] [--prompt K] [--tol 1e-5]
  CKPT_DIR (default FIXTURE_DIR) is the transformers-named float checkpoint whose values the rows
  come from (for the hub / NVFP4 fixtures: the A_dequant_hf / B_dequant_hf copy).
Prints per prompt the max |diff| over all rows and whether the greedy tokens equal the argmax.
"""
import argparse
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tools'))
import v4_reference as R  # noqa: E402

_orig_load = R.load_safetensors


def _load_one(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    if all(v.get('dtype') != 'BF16' for k, v in hdr.items() if k != '__metadata__'):
        return _orig_load(path)
    out = {}
    for k, v in hdr.items():
        if k == '__metadata__':
            continue
        a, b = v['data_offsets']
        raw = data[a:b]
        dt = v['dtype']
        if dt == 'BF16':
            h = struct.unpack('<%dH' % ((b - a) // 2), raw)
            flat = list(struct.unpack('<%df' % len(h), struct.pack('<%dI' % len(h), *[x << 16 for x in h])))
        elif dt == 'F32':
            flat = list(struct.unpack('<%df' % ((b - a) // 4), raw))
        elif dt == 'I64':
            flat = list(struct.unpack('<%dq' % ((b - a) // 8), raw))
        elif dt == 'I32':
            flat = list(struct.unpack('<%di' % ((b - a) // 4), raw))
        else:
            raise ValueError('%s: dtype %s' % (k, dt))
        shp = v['shape']
        if len(shp) == 2:
            r, c = shp
            out[k] = [flat[i * c:(i + 1) * c] for i in range(r)]
        else:
            out[k] = flat
    return out


def load_any(path):
    """`path` is CKPT/model.safetensors as v4_reference builds it; fall back to the index."""
    if os.path.exists(path):
        return _load_one(path)
    d = os.path.dirname(path)
    idx = json.load(open(os.path.join(d, 'model.safetensors.index.json')))
    out = {}
    for fn in sorted(set(idx['weight_map'].values())):
        out.update(_load_one(os.path.join(d, fn)))
    return out


R.load_safetensors = load_any
SCORING = {'sqrtsoftplus': lambda v: math.sqrt(R.softplus(v)), 'sigmoid': R.sigmoid}


def moe(self, x, tok, shared_clamp):
    """v4_reference Layer.moe with the config's scoring function (sqrtsoftplus | sigmoid)."""
    cfg = self.cfg
    f = SCORING[cfg.scoring]
    s = [f(v) for v in R.mv(self.gate_w, x)]
    if self.is_hash:
        idx = list(self.tid2eid[tok])
    else:
        b = self.gate_b
        idx = R.topk_idx([v + b[i] for i, v in enumerate(s)], cfg.n_act)
    w = [s[i] for i in idx]
    z = sum(w)
    w = [v / z * cfg.route_scale for v in w]
    y = [0.0] * len(x)
    for wi, e in zip(w, idx):
        out = self.expert(self.experts[e], x, True)
        y = [a + wi * b for a, b in zip(y, out)]
    sh = self.expert(self.shared, x, shared_clamp)
    return [a + b for a, b in zip(y, sh)]


R.Layer.moe = moe


def _argmax(v):
    return max(range(len(v)), key=lambda i: v[i])


def reference_generate(ckpt, prompt, new_tokens):
    """Greedy generation with the reference, token by token: returns (greedy, rows) where rows are
    the logits after each fed position (prompt + greedy[:-1]), the same layout as logits_i.f32."""
    cfg = json.load(open(os.path.join(ckpt, 'config.json')))
    m = R.Model(ckpt, True)
    m.cfg.scoring = cfg.get('scoring_func', 'sqrtsoftplus')
    toks, greedy, rows = list(prompt), [], []
    for t in range(len(prompt) + new_tokens - 1):
        lg = m.step(toks[t], t)
        rows.append(lg)
        if t >= len(prompt) - 1:
            greedy.append(_argmax(lg))
            toks.append(greedy[-1])
    return greedy, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('fixture')
    ap.add_argument('--ckpt', default=None)
    ap.add_argument('--prompt', type=int, default=-1)
    ap.add_argument('--tol', type=float, default=1e-5)
    a = ap.parse_args()
    ckpt = a.ckpt or a.fixture
    oracle = json.load(open(os.path.join(a.fixture, 'oracle.json')))
    cfg = json.load(open(os.path.join(ckpt, 'config.json')))
    scoring = cfg.get('scoring_func', 'sqrtsoftplus')
    if scoring not in SCORING:
        print('scoring_func %r not supported (see docstring)' % scoring)
        return 2
    m = R.Model(ckpt, True)   # shared expert clamped, as current official code and transformers do
    m.cfg.scoring = scoring
    worst = 0.0
    ok = True
    ks = range(len(oracle['prompts'])) if a.prompt < 0 else [a.prompt]
    for k in ks:
        pr, greedy = oracle['prompts'][k], oracle['greedy'][k]
        toks = pr + greedy
        rows = oracle['rows'][k]
        raw = open(os.path.join(a.fixture, 'logits_%d.f32' % k), 'rb').read()
        ref = struct.unpack('<%df' % (len(raw) // 4), raw)
        V = len(ref) // rows
        m.reset()
        diffs, am = [], []
        for t in range(rows):
            lg = m.step(toks[t], t)
            row = ref[t * V:(t + 1) * V]
            diffs.append(max(abs(x - y) for x, y in zip(lg, row)))
            am.append(_argmax(lg))
        greedy_ok = am[len(pr) - 1:] == greedy
        mx = max(diffs)
        worst = max(worst, mx)
        ok = ok and greedy_ok and mx <= a.tol
        print('%s prompt %d len %d rows %d: max |ref - rows| %.3g at row %d; reference argmax == greedy: %s'
              % (os.path.basename(os.path.normpath(a.fixture)), k, len(pr), rows, mx, diffs.index(mx), greedy_ok),
              flush=True)
    print('%s: worst %.3g (tol %g) -> %s' % (os.path.basename(os.path.normpath(a.fixture)), worst, a.tol,
                                           'OK' if ok else 'FAIL'))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())

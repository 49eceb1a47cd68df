#!/usr/bin/env bash
# gpu_run.sh — the GPU runs behind bench/results/moe-h200.json: this tree against a base tree (the code before a
# change), built the same way, on one GPU.
#
#   bash bench/gpu_run.sh build  BASE          build BASE and this tree (sm_90a, -O3): kernels, moe_cuda, the digest,
#                                              sluice-bench, test_moe_gpu; nvcc and gcc only (no CPU deps)
#   bash bench/gpu_run.sh digest BASE          sluice-moe-digest of both trees, diffed: IDENTICAL or the lines that differ
#   bash bench/gpu_run.sh test                 this tree's test_moe_gpu (assertions against the CPU reference)
#   bash bench/gpu_run.sh bench  BASE [COMMIT] `sluice-bench moe --reps 12 --stages` for BASE and this tree alternating
#                                              (base, new, new, base, ...: N=2 processes each), merged by moe_merge.py into
#                                              bench/results/moe-h200.json (this tree's medians, baseline_ms = BASE's)
#   bash bench/gpu_run.sh moe-ab BASE [COMMIT] digest, test, bench (build first, in an earlier call)
#   bash bench/gpu_run.sh engine [TESTS]       build the engine (every kernel, the cuda backend, sluice-generate,
#                                              sluice-bench) and the GPU tests into .ab/build-engine, then run TESTS
#                                              (default: test_v4_ops test_dense_gpu test_backend_cuda); the CPU deps
#                                              come from .debs/ (bench/device_deps.sh) where the image lacks them
#
# Run from the repository root. BASE: a plain copy of the base tree's files (git archive BASE_SHA | tar -x -C .ab/base).
# Builds go to .ab/build-{base,new} (git-ignored, kept between calls on the same machine). Logs go to $OUT if set (the
# digests, test and bench logs; at most 8 files), else .ab/out. N: bench processes per tree (default 2).
# PEER=1 re-measures the PyTorch peer (bench/moe_peer.py, ~150 s); by default the peer's times are those of the
# committed bench/results/moe-h200.json.
set -uo pipefail
cmd=${1:-}
BASE=${2:-}
COMMIT=${3:-${COMMIT:-unknown}}
ROOT=$PWD
OUT=${OUT:-$ROOT/.ab/out}
mkdir -p "$OUT" "$ROOT/.ab"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_INC=$(dirname "$(dirname "$NVCC")")/include
ARCH="-gencode arch=compute_90a,code=sm_90a"
NVFLAGS="-O3 -DNDEBUG $ARCH --expt-relaxed-constexpr -lineinfo -Xcompiler=-Wall"
CFLAGS="-O3 -DNDEBUG -std=c11 -D_GNU_SOURCE -DSLUICE_HAVE_CUDA=1 -I$CUDA_INC"

need_base() {
  [ -n "$BASE" ] && [ -f "$BASE/engine/cuda/moe_cuda.h" ] || { echo "gpu_run.sh: $cmd needs BASE, a copy of the base tree" >&2; exit 2; }
  BASE=$(cd "$BASE" && pwd)
}

# build_tree SRC DIR: every .cu file that defines the layer's kernels (sm90/*.cu; the bench helpers from bench/ where the
# tree has them there, else from kernels/sm90), moe_cuda (+ moe_plan), quant, then the three programs. The digest's
# source is this tree's bench/moe_digest.c for both trees (it uses only entry points both have).
build_tree() {
  local src=$1 b=$2 cu objs=() pids=()
  rm -rf "$b"; mkdir -p "$b"
  for cu in "$src"/kernels/sm90/*.cu "$src"/bench/moe_bench_kernels.cu; do
    [ -f "$cu" ] || continue
    local o="$b/$(basename "$cu" .cu).o"
    objs+=("$o")
    $NVCC $NVFLAGS -I"$src/kernels" -I"$src/bench" -c "$cu" -o "$o" > "$b/$(basename "$cu" .cu).log" 2>&1 &
    pids+=($!)
  done
  local inc="-I$src/engine -I$src/engine/cuda -I$src/kernels -I$src/bench"
  for c in "$src"/engine/cuda/moe_*.c "$src"/engine/quant.c; do
    local o="$b/c_$(basename "$c" .c).o"
    objs+=("$o")
    gcc $CFLAGS $inc -c "$c" -o "$o" || return 1
  done
  gcc $CFLAGS $inc -c "$ROOT/bench/moe_digest.c" -o "$b/moe_digest.o" || return 1
  gcc $CFLAGS $inc -c "$src/bench/sluice_bench.c" -o "$b/sluice_bench.o" || return 1
  gcc $CFLAGS $inc -c "$src/tests/gpu/test_moe_gpu.c" -o "$b/test_moe_gpu.o" || return 1
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ $rc = 0 ] || { cat "$b"/*.log >&2; return 1; }
  $NVCC $ARCH -o "$b/sluice-moe-digest" "$b/moe_digest.o" "${objs[@]}" -lm &&
    $NVCC $ARCH -o "$b/test_moe_gpu" "$b/test_moe_gpu.o" "${objs[@]}" -lm || return 1
  if [ -f "$src/bench/bench_decode.c" ]; then   # sluice-bench needs the whole engine there: the engine build's
    [ -x "$ROOT/.ab/build-engine/sluice_bench" ] || build_engine || return 1
    cp "$ROOT/.ab/build-engine/sluice_bench" "$b/sluice-bench"
  else
    $NVCC $ARCH -o "$b/sluice-bench" "$b/sluice_bench.o" "${objs[@]}" -lm -ldl
  fi
}

do_build() {
  need_base
  local t0=$SECONDS
  build_tree "$BASE" "$ROOT/.ab/build-base" > "$OUT/build.log" 2>&1 & local pb=$!
  build_tree "$ROOT" "$ROOT/.ab/build-new" > "$OUT/build-new.log" 2>&1 & local pn=$!
  local rc=0
  wait $pb || { echo "== base build FAILED"; tail -30 "$OUT/build.log"; rc=1; }
  wait $pn || { echo "== new build FAILED"; tail -30 "$OUT/build-new.log"; rc=1; }
  cat "$OUT/build-new.log" >> "$OUT/build.log"; rm -f "$OUT/build-new.log"
  echo "== builds done in $((SECONDS - t0)) s (rc $rc)"
  return $rc
}

do_digest() {
  need_base
  local rc=0
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$ROOT/.ab/build-base/sluice-moe-digest" > "$OUT/digest-base.txt" 2> "$OUT/digest-base.err" || rc=$?
  echo "== base digest rc $rc ($(wc -l < "$OUT/digest-base.txt") lines)"; cat "$OUT/digest-base.err"
  local rn=0
  "$ROOT/.ab/build-new/sluice-moe-digest" > "$OUT/digest-new.txt" 2> "$OUT/digest-new.err" || rn=$?
  echo "== new digest rc $rn ($(wc -l < "$OUT/digest-new.txt") lines)"; cat "$OUT/digest-new.err"
  rm -f "$OUT/digest-base.err" "$OUT/digest-new.err"
  if [ -s "$OUT/digest-new.txt" ] && diff -q "$OUT/digest-base.txt" "$OUT/digest-new.txt" > /dev/null; then
    echo "== digests IDENTICAL ($(wc -l < "$OUT/digest-new.txt") lines: fmt shared_bf16 routing T fnv1a64)"
  else
    echo "== digests DIFFER:"; diff "$OUT/digest-base.txt" "$OUT/digest-new.txt"; return 1
  fi
  [ $rc = 0 ] && [ $rn = 0 ]
}

do_test() {
  timeout 480 "$ROOT/.ab/build-new/test_moe_gpu" ${SEED:-} > "$OUT/test.log" 2>&1
  local rc=$?
  grep -E 'FAIL|seed' "$OUT/test.log" | head -20
  echo "== test_moe_gpu rc $rc: $(tail -1 "$OUT/test.log") ($(grep -c 'T=' "$OUT/test.log") cases)"
  return $rc
}

do_bench() {
  need_base
  local n=${N:-2} peer="$OUT/peer.txt" i k order=()
  if [ "${PEER:-0}" = 1 ]; then
    PYTHONUNBUFFERED=1 timeout 200 python3 "$ROOT/bench/moe_peer.py" --out "$peer" 2>&1 | tail -5
  else   # the committed JSON's peer times (batch routing peer_ms peer_ms_queued)
    python3 -c "
import json
for r in json.load(open('$ROOT/bench/results/moe-h200.json'))['rows']:
    if r.get('peer_ms') is not None:
        print(r['batch'], r['routing'], r['peer_ms'], r.get('peer_ms_queued') or '')" > "$peer"
  fi
  for ((i = 0; i < n; i++)); do   # base, new, new, base, base, new, ...
    if [ $((i % 2)) = 0 ]; then order+=(base new); else order+=(new base); fi
  done
  local cmdline="bash bench/gpu_run.sh bench BASE $COMMIT (sluice-bench moe --peer peer.txt --reps 12 --stages, base and new alternating, $n processes each, per row the median: bench/moe_merge.py)"
  local nb=0 nn=0 base_js=() new_js=()
  for k in "${order[@]}"; do
    local j
    if [ "$k" = base ]; then nb=$((nb + 1)); j="$ROOT/.ab/bench-base-$nb.json"; base_js+=("$j")
    else nn=$((nn + 1)); j="$ROOT/.ab/bench-new-$nn.json"; new_js+=("$j"); fi
    echo "== bench $k ($([ "$k" = base ] && echo $nb || echo $nn)/$n)"
    timeout 200 env BENCH_COMMAND="$cmdline" "$ROOT/.ab/build-$k/sluice-bench" moe --peer "$peer" --reps 12 --stages \
      --out "$j" --commit "$COMMIT" >> "$OUT/bench-$k.log" 2>&1 || { echo "bench $k failed"; tail -20 "$OUT/bench-$k.log"; return 1; }
  done
  python3 "$ROOT/bench/moe_merge.py" --commit "$COMMIT" --baseline "$(IFS=,; echo "${base_js[*]}")" "${new_js[@]}" \
    > "$ROOT/bench/results/moe-h200.json" || return 1
  cp "$ROOT/bench/results/moe-h200.json" "$OUT/moe-h200.json"
  python3 "$ROOT/bench/moe_merge.py" --ab "$ROOT/bench/results/moe-h200.json"
}

# build_engine: libsluice (engine C + cuda C + kernels) and the programs, nvcc and gcc only
build_engine() {
  local b="$ROOT/.ab/build-engine" objs=() pids=() f o
  source "$ROOT/bench/device_deps.sh"
  rm -rf "$b"; mkdir -p "$b"
  for f in "$ROOT"/kernels/sm90/*.cu; do
    o="$b/$(basename "$f" .cu).o"; objs+=("$o")
    $NVCC $NVFLAGS -I"$ROOT/kernels" -c "$f" -o "$o" > "$o.log" 2>&1 & pids+=($!)
  done
  $NVCC $NVFLAGS -I"$ROOT/kernels" -I"$ROOT/bench" -c "$ROOT/bench/moe_bench_kernels.cu" -o "$b/bench_kernels.o" \
    > "$b/bench_kernels.log" 2>&1 & pids+=($!)
  local inc=(-I"$ROOT/engine" -I"$ROOT/engine/cuda" -I"$ROOT/kernels" -I"$ROOT/bench" "${INC[@]}")
  local defs="-DSLUICE_HAVE_CUDA_BACKEND=1 -DSLUICE_HAVE_ONIG=1 -DSLUICE_TEST_DATA=\"$ROOT/tests/data\""
  for f in "$ROOT"/engine/*.c "$ROOT"/engine/cpu/*.c "$ROOT"/engine/cuda/*.c; do
    o="$b/c_$(basename "$(dirname "$f")")_$(basename "$f" .c).o"; objs+=("$o")
    gcc $CFLAGS $defs "${inc[@]}" -c "$f" -o "$o" & pids+=($!)
  done
  for f in tests/gpu/test_v4_ops tests/gpu/test_dense_gpu tests/gpu/test_backend_cuda tests/gpu/test_moe_gpu tests/gpu/test_synthetic_gpu \
           tests/gpu/test_multigpu engine/cli/sluice_generate bench/sluice_bench; do
    gcc $CFLAGS $defs "${inc[@]}" -c "$ROOT/$f.c" -o "$b/main_$(basename "$f").o" & pids+=($!)
  done
  gcc $CFLAGS $defs "${inc[@]}" -c "$ROOT/bench/bench_decode.c" -o "$b/bench_decode.o" & pids+=($!)
  gcc $CFLAGS $defs "${inc[@]}" -c "$ROOT/bench/bench_ops.c" -o "$b/bench_ops.o" & pids+=($!)
  gcc $CFLAGS $defs "${inc[@]}" -c "$ROOT/bench/bench_engine.c" -o "$b/bench_engine.o" & pids+=($!)
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ $rc = 0 ] || { cat "$b"/*.log >&2; return 1; }
  local libs=(-ljansson -lonig -lunistring -lpthread -lm -ldl) ldirs=()
  if [ ${#LIBS[@]} -gt 0 ]; then ldirs=(-L/tmp/tokdeps/usr/lib/x86_64-linux-gnu -Xlinker -rpath -Xlinker /tmp/tokdeps/usr/lib/x86_64-linux-gnu); fi
  for f in test_v4_ops test_dense_gpu test_backend_cuda test_moe_gpu test_synthetic_gpu test_multigpu sluice_generate sluice_bench; do
    local extra=""; [ $f = sluice_bench ] && extra="$b/bench_decode.o $b/bench_ops.o $b/bench_engine.o"
    $NVCC $ARCH -o "$b/$f" "$b/main_$f.o" $extra "${objs[@]}" "$b/bench_kernels.o" "${ldirs[@]}" "${libs[@]}" || return 1
  done
}

do_engine() {
  local t0=$SECONDS rc=0 t
  build_engine > "$OUT/engine-build.log" 2>&1 || { echo "== engine build FAILED"; tail -40 "$OUT/engine-build.log"; return 1; }
  echo "== engine built in $((SECONDS - t0)) s"
  for t in ${TESTS:-test_v4_ops test_dense_gpu test_backend_cuda}; do
    t0=$SECONDS
    timeout "${TEST_TIMEOUT:-400}" "$ROOT/.ab/build-engine/$t" > "$OUT/$t.log" 2>&1
    local r=$?
    [ $r = 0 ] || rc=1
    echo "== $t rc $r in $((SECONDS - t0)) s"
    grep -E 'FAIL|failures|passed|worst|rel L2|invariance|preempt|overlap' "$OUT/$t.log" | head -${LINES_PER_TEST:-40}
  done
  return $rc
}

case "$cmd" in
  engine) shift; [ $# -gt 0 ] && TESTS="$*"; do_engine ;;
  build) do_build ;;
  digest) do_digest ;;
  test) do_test ;;
  bench) do_bench ;;
  moe-ab)
    rc=0
    do_digest || rc=1
    do_test || rc=1
    do_bench || rc=1
    exit $rc ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac

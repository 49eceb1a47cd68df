#!/usr/bin/env bash
# Compile-time A/B of the MoE kernels in one device call: builds each variant (nvcc -D flags), runs
# tests/gpu/test_moe_gpu on each, then `sluice-bench moe` for the variants in turn, ROUNDS times
# (A B A B ...: the GPU drifts by up to ~9 % over a minute of load, bench/NOTES.md v12), and prints
# one table row per batch with every reading. Optional NCU="batch:kernel-regex ..." profiles the first
# variant (stall reasons per issued instruction, DRAM and issue throughput); TESTS="a b" runs the test only
# for those variants (default all; TEST_TIMEOUT seconds each, default 300: the full test takes ~160 s). STREAM=1 runs
# `sluice-bench stream` (compute-free streaming probe) for each variant instead of the tests and bench.
# NCU_ARGS: more sluice-bench arguments for the profiled run (e.g. --variants ...).
# A variant NAME builds from .ab/NAME (AB_SRC) where that folder exists, e.g. a commit's sources:
#   mkdir -p .ab/head && git archive HEAD kernels engine tests/gpu bench | tar -x -C .ab/head   (carry .ab)
# Usage (repo root, on the GPU machine):
#   VARIANTS="base: rolled:-DMOE_ROLLED=1" ROUNDS=2 BENCH_ARGS="--batches 1,8,64 --routing random" \
#     bash bench/moe_ab.sh                                     # files in $OUT
set -uo pipefail
OUT=${OUT:-/tmp/moe-ab-out}; mkdir -p "$OUT"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ARCH="-gencode arch=compute_90a,code=sm_90a"
CF="-O2 -std=c11 -D_GNU_SOURCE -DSLUICE_HAVE_CUDA=1 -Iengine -Iengine/cuda -Ikernels -I/usr/local/cuda/include"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
names=()
for v in ${VARIANTS:-base:}; do
  n=${v%%:*} d=${v#*:}; d=${d//,/ }; names+=("$n")
  B=/tmp/moe-ab/$n; rm -rf $B; mkdir -p $B
  S=.; [ -d "${AB_SRC:-.ab}/$n" ] && S=${AB_SRC:-.ab}/$n   # that variant's own sources (e.g. a commit's)
  ( cd $S && for f in kernels/sm90/*.cu; do
      $NVCC -O3 $ARCH -Ikernels $d -lineinfo -Xptxas -v -c $f -o $B/$(basename $f .cu).o 2> $B/$(basename $f .cu).ptxas &
    done; wait
    gcc $CF -c engine/cuda/moe_cuda.c -o $B/moe_cuda.o && gcc $CF -c engine/quant.c -o $B/quant.o && gcc $CF -c tests/gpu/test_moe_gpu.c -o $B/t.o &&
    gcc $CF -c bench/sluice_bench.c -o $B/b.o || exit 1
    KO="$B/moe_repack.o $B/moe_router.o $B/moe_expert.o $B/moe_fused.o $B/moe_bench_kernels.o $B/moe_cuda.o $B/quant.o"
    $NVCC $ARCH -o $B/test_moe_gpu $B/t.o $KO -lm && $NVCC $ARCH -o $B/sluice-bench $B/b.o $KO -lm -ldl ) &
done
wait
if [ "${STREAM:-0}" = 1 ]; then   # the compute-free streaming probe instead (sluice-bench stream)
  for n in "${names[@]}"; do echo "== stream $n"; /tmp/moe-ab/$n/sluice-bench stream --out $OUT/stream-$n.json; done
  exit 0
fi
for n in "${names[@]}"; do
  B=/tmp/moe-ab/$n
  [ -x $B/sluice-bench ] || { echo "variant $n did not build"; cat $B/*.ptxas | grep -i error | head; exit 1; }
  echo "== $n: $(grep -h spill $B/moe_expert.ptxas $B/moe_fused.ptxas | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  if [ -n "${SASS_FN:-}" ]; then   # SASS opcode histogram of the kernels matching SASS_FN (mangled-name regex)
    cuobjdump -sass $B/moe_expert.o | awk -v re="$SASS_FN" '/Function : /{f = ($0 ~ re)} f' > $OUT/sass-$n.txt
    echo "   sass: $(bash bench/sass_hist.sh $OUT/sass-$n.txt 12 | tr -s ' ' | tr '\n' ' ')"
    echo "   hmul2 forms: $(grep -oE 'HMUL2[^;]*' $OUT/sass-$n.txt | sed -E 's/R[0-9]+/R/g' | sort | uniq -c | sort -rn | head -4 | tr -s ' ' | tr '\n' ';')"
  fi
  case " ${TESTS:-$n} " in *" $n "*) ;; *) continue ;; esac   # TESTS="a b": test only these variants
  timeout ${TEST_TIMEOUT:-300} $B/test_moe_gpu > $OUT/test-$n.log 2>&1; echo "test $n: rc $? $(tail -1 $OUT/test-$n.log)"
done
for r in $(seq 1 ${ROUNDS:-2}); do
  for n in "${names[@]}"; do
    timeout 120 /tmp/moe-ab/$n/sluice-bench moe ${BENCH_ARGS:-} > $OUT/bench-$n-$r.log 2>&1
  done
done
# each reading as ms/queued (v27 (6): a launch-order change can move the unqueued replays and not the queued ones)
echo "batch routing $(for r in $(seq 1 ${ROUNDS:-2}); do for n in "${names[@]}"; do printf '%s/%s ' $n $r; done; done)(ms/queued ms)"
for f in $OUT/bench-${names[0]}-1.log; do
  grep -E "^ +[0-9]+ +(random|skewed)" $f | while read -r b rt _; do
    row="$b $rt"
    for r in $(seq 1 ${ROUNDS:-2}); do for n in "${names[@]}"; do
      row="$row $(grep -E "^ +$b +$rt " $OUT/bench-$n-$r.log | head -1 | awk '{print $3 "/" $9}')"
    done; done
    echo "$row"
  done
done
if [ -n "${NCU:-}" ]; then
  M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_issued.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
  for spec in $NCU; do
    b=${spec%%:*} k=${spec#*:}
    ncu --clock-control none -k regex:"$k" -c 1 --metrics "$M" /tmp/moe-ab/${names[0]}/sluice-bench moe --batches $b --reps 1 --routing random ${NCU_ARGS:-} > $OUT/ncu-$b.txt 2>&1
    echo "== ncu batch $b ($k): top stalls (warps per issue)"
    grep -E "gpu__time_duration|dram__throughput|inst_issued" $OUT/ncu-$b.txt | awk '{print "  ",$1,$(NF)}'
    grep -E "issue_stalled" $OUT/ncu-$b.txt | awk '{print $NF, $1}' | sort -rn | head -7 | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{print "  ",$0}'
  done
fi

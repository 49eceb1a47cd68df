#!/usr/bin/env bash
# One device call for the MoE work: build with nvcc/gcc directly (the GPU image need not have the
# project's CPU deps: jansson/oniguruma come from .debs/*.deb when /usr/include lacks them, as in
# bench/tokenizer_peer.sh), run the GPU MoE test, the "cuda" engine backend test (test_backend_cuda)
# and `sluice-generate --backend cuda` on the hub fixture, then the PyTorch peer and `sluice-bench moe`.
# Usage (repo root, on the GPU machine): COMMIT=<sha> bash bench/moe_device_run.sh   -> files in $OUT
# (TEST=0 skips test_moe_gpu, ENGINE=0 the engine build and its tests, PEER=0 the PyTorch peer, COOL=N sleeps N s before the bench;
#  BENCH_ARGS go to sluice-bench,
#  e.g. "--batches 1,64 --tune 0,0,0/4,64,4" to compare launch thresholds in one process.)
set -uo pipefail
OUT=${OUT:-/tmp/moe-out}; mkdir -p "$OUT"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
B=/tmp/moe-build; rm -rf $B; mkdir -p $B
ARCH="-gencode arch=compute_90a,code=sm_90a"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for f in kernels/sm90/*.cu; do
  $NVCC -O3 $ARCH -Ikernels -lineinfo -Xptxas -v -c $f -o $B/$(basename $f .cu).o 2> $B/$(basename $f .cu).ptxas &
done
wait
grep -h "registers\|spill" $B/moe_expert.ptxas | sort | uniq -c | head
CF="-O2 -std=c11 -D_GNU_SOURCE -DSLUICE_HAVE_CUDA=1 -Iengine -Iengine/cuda -Ikernels -I/usr/local/cuda/include"
gcc $CF -c engine/cuda/moe_cuda.c -o $B/moe_cuda.o && gcc $CF -c engine/quant.c -o $B/quant.o || exit 1
gcc $CF -c tests/gpu/test_moe_gpu.c -o $B/test_moe_gpu.o || exit 1
gcc $CF -c bench/sluice_bench.c -o $B/sluice_bench.o || exit 1
KO="$B/moe_repack.o $B/moe_router.o $B/moe_expert.o $B/moe_fused.o $B/moe_bench_kernels.o $B/moe_cuda.o $B/quant.o"
$NVCC $ARCH -o $B/test_moe_gpu $B/test_moe_gpu.o $KO -lm || exit 1
$NVCC $ARCH -o $B/sluice-bench $B/sluice_bench.o $KO -lm -ldl || exit 1
if [ "${MODE:-}" = profile ]; then   # SASS instruction mix + ncu passes over the expert kernels
  # SASS_FN: mangled-name regex of the kernel whose SASS histogram is printed; NCU_SPECS: "batch:kernel-regex ..."
  # profiled with the source counters, each exported as a per-SASS-instruction CSV (ncu-B.csv)
  [ "${PTEST:-0}" = 1 ] && { timeout 150 $B/test_moe_gpu 2>&1 | tail -3; }
  cuobjdump -sass $B/moe_expert.o > $OUT/expert.sass 2>&1
  awk -v re="${SASS_FN:-k_gate_upILi0}" '/Function : /{f = ($0 ~ re)} f' $OUT/expert.sass > $OUT/fn.sass
  bash bench/sass_hist.sh $OUT/fn.sass 25
  for spec in ${NCU_SPECS:-64:k_experts1}; do
    b=${spec%%:*} k=${spec#*:}
    ncu --clock-control none -k regex:"$k" -c 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters --section Occupancy ${NCU_EXTRA:-} \
      -o $OUT/ncu-$b $B/sluice-bench moe --batches $b --reps 1 --routing random > $OUT/ncu-$b.log 2>&1
    ncu -i $OUT/ncu-$b.ncu-rep --print-details all > $OUT/ncu-$b.txt 2>&1
    ncu -i $OUT/ncu-$b.ncu-rep --page source --csv --print-source sass > $OUT/ncu-$b.csv 2>&1
    echo "== ncu $b ($k): $(wc -l < $OUT/ncu-$b.csv) csv lines"
    grep -E "Duration|DRAM Throughput|Issue Slots Busy|Issued Warp|Eligible Warps|Active Warps Per|No Eligible|Achieved Occupancy|Executed Ipc A" $OUT/ncu-$b.txt | head -${NCU_LINES:-14}
    rm -f $OUT/ncu-$b.ncu-rep
  done
  exit 0
fi
[ "${TEST:-1}" = 1 ] && { echo "== test"; timeout ${TEST_TIMEOUT:-480} $B/test_moe_gpu ${SEED:-} 2>&1 | tee "$OUT/test.log"; }   # v21: 150 s cut it once; v38: 300 s (403 cases)
if [ "${ENGINE:-1}" = 1 ]; then   # the engine with the "cuda" backend (MoE on the GPU, the rest on the CPU)
  INC="" LIBS=""
  if [ ! -f /usr/include/oniguruma.h ] || [ ! -f /usr/include/jansson.h ] || [ ! -f /usr/include/uninorm.h ]; then
    for f in .debs/*.deb; do dpkg -x "$f" /tmp/tokdeps; done
    INC="-I/tmp/tokdeps/usr/include" LIBS="-L/tmp/tokdeps/usr/lib/x86_64-linux-gnu -Xlinker -rpath=/tmp/tokdeps/usr/lib/x86_64-linux-gnu"
  fi
  EF="$CF -DSLUICE_HAVE_CUDA_BACKEND=1 -DSLUICE_HAVE_ONIG=1 $INC"
  mkdir -p $B/eng
  ls engine/*.c engine/cpu/*.c engine/cuda/*.c | grep -v moe_cuda.c | xargs -P 16 -I{} sh -c 'gcc '"$EF"' -c {} -o '"$B"'/eng/$(echo {} | tr / _).o' 2>&1 | tee $OUT/build.log
  gcc $EF -DSLUICE_TEST_DATA="\"$PWD/tests/data\"" -c tests/gpu/test_backend_cuda.c -o $B/test_backend_cuda.o 2>&1 | tee -a $OUT/build.log
  gcc $EF -c engine/cli/sluice_generate.c -o $B/sluice_generate.o 2>&1 | tee -a $OUT/build.log
  EO="$B/eng/*.o $B/moe_cuda.o $B/moe_repack.o $B/moe_router.o $B/moe_expert.o $B/moe_fused.o"
  $NVCC $ARCH -o $B/test_backend_cuda $B/test_backend_cuda.o $EO $LIBS -ljansson -lonig -lunistring -lpthread -lm 2>&1 | tee -a $OUT/build.log
  $NVCC $ARCH -o $B/sluice-generate $B/sluice_generate.o $EO $LIBS -ljansson -lonig -lunistring -lpthread -lm 2>&1 | tee -a $OUT/build.log
  echo "== backend"; timeout 150 $B/test_backend_cuda 2>&1 | tee "$OUT/backend.log"
  echo "== generate"; FX=tests/data/tiny-v4-hub-fp8-mxfp4
  for k in 2 3; do
    P=$(python3 -c "import json;print(','.join(map(str,json.load(open('$FX/oracle.json'))['prompts'][$k])))")
    G=$(python3 -c "import json;print(json.load(open('$FX/oracle.json'))['greedy'][$k])")
    echo "prompt $k oracle greedy: $G"
    timeout 60 $B/sluice-generate --model $FX --backend cuda --tokens "$P" --max-new-tokens 24 --ignore-eos 2>&1 | tail -2
  done 2>&1 | tee "$OUT/generate.log"
fi
[ "${PEER:-1}" = 1 ] && echo "== peer" && PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-150} python3 bench/moe_peer.py --out "$OUT/peer.txt" ${PEER_ARGS:-} 2>&1 | tail -25
# COOL=N: N seconds idle before the bench (the peer's compute heats the GPU; our kernels are issue-bound and
# slow down with it: in one process the same configuration read 0.855 ms at batch 64 first and 0.929 ms
# ~60 s of load later, bench/NOTES.md v12)
[ -n "${COOL:-}" ] && echo "== cool-down ${COOL} s" && sleep "$COOL"
# REPEAT=N: N bench processes one after another (0: none) (each with its own read ceiling), merged by
# bench/moe_merge.py into moe-h200.json: per row the median time of the N (the readings in ms_runs), so a
# goal that sits within the run-to-run spread (+-2 %, bench/NOTES.md v19) is decided by the median
CMD="COMMIT=${COMMIT:-unknown} BENCH_ARGS='${BENCH_ARGS:-}' bash bench/moe_device_run.sh (python3 bench/moe_peer.py --out peer.txt; sluice-bench moe --peer peer.txt --out moe-h200.json ${BENCH_ARGS:-})"
N=${REPEAT:-1}
[ "$N" -gt 1 ] && CMD="REPEAT=$N $CMD, $N processes, per row the median (bench/moe_merge.py)"
# the GPU's clocks, power and clock-event reasons every 100 ms while the bench processes run; smi_summary.py prints
# each process's medians (clocks.txt): what the spread between processes goes with (bench/NOTES.md v20)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 100 > "$OUT/smi.csv" 2> "$OUT/smi.err" &
SMI=$!
for i in $(seq 1 "$N"); do
  J="$OUT/moe-h200.json"; L="$OUT/bench.log"
  [ "$N" -gt 1 ] && J="$OUT/moe-h200-run$i.json" L="$OUT/bench-run$i.log"
  date +%s.%N > "$OUT/bench-t$i.start"
  echo "== bench $i/$N"; timeout ${BENCH_TIMEOUT:-150} env BENCH_COMMAND="$CMD" $B/sluice-bench moe --peer "$OUT/peer.txt" \
    --out "$J" --commit "${COMMIT:-unknown}" ${BENCH_ARGS:-} 2>&1 | tee "$L"
  date +%s.%N > "$OUT/bench-t$i.end"
done
kill $SMI 2> /dev/null
[ "$N" -gt 0 ] && python3 bench/smi_summary.py "$OUT" "$N" | tee "$OUT/clocks.txt"
[ "$N" -gt 1 ] && python3 bench/moe_merge.py "$OUT"/moe-h200-run*.json > "$OUT/moe-h200.json" && cat "$OUT"/bench-run*.log > "$OUT/bench.log" &&
  python3 bench/moe_merge.py --table "$OUT/moe-h200.json"
# the run tool brings back only a few files per call (a 3-process run writes ~20): all but the result, the clock
# summary and the test log go into one archive, moe-out.tgz (v20: a run's JSON files were left on the machine)
(cd "$OUT" && ls | grep -vxE 'moe-h200.json|clocks.txt|test.log|moe-out.tgz' | tar czf moe-out.tgz --remove-files -T -)
exit 0

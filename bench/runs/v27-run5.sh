#!/usr/bin/env bash
# v27 run 5 (bench/NOTES.md v27 (5)): first an A/B of the shared down in 16-token blocks up to batch 128 (SD 128, the
# default of this commit) against 64 (SD 64, as before) at 128, in one process A B B A, then B A A B; then the committed
# run at the commit given as $1 (bench/runs/v25-run3.sh: the full test_moe_gpu, test_backend_cuda, the hub generate,
# the peer, three bench processes). Carry .debs.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-out}; mkdir -p $OUT
VARIANTS="new:" TESTS="none" ROUNDS=0 OUT=$OUT bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"
N=/tmp/moe-ab/new
D=1,16,33,4,16,0,32,0,16,1,1,256,0,0,8,24,3,16,32,0,8,2,1,4,2,2,16,128,64,32,9,2,512,512,0,1,512,256,32,1
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s@%s q%s;", v, $1, substr($2,1,1), $3, $(NF-1), $(NF-2)}' "$1"; }
A="--batches 64,128 --reps 8 --stages"
timeout 60 $N/sluice-bench moe $A --variants "$D,64/$D,128/$D,128/$D,64" > $OUT/sd-1.log 2>&1; echo "sd ABBA (SD 64, 128, 128, 64):$(row $OUT/sd-1.log)"
timeout 60 $N/sluice-bench moe $A --variants "$D,128/$D,64/$D,64/$D,128" > $OUT/sd-2.log 2>&1; echo "sd BAAB (SD 128, 64, 64, 128):$(row $OUT/sd-2.log)"
grep -E "stages 128 " $OUT/sd-1.log | cut -c1-300
( cd $OUT && tar czf v27-run5-sd.tgz --remove-files sd-*.log )
bash bench/runs/v25-run3.sh $1

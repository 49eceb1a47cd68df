#!/usr/bin/env bash
# v24 run 1 (bench/NOTES.md v23 (9)-(10)), prepared in session 14, not yet run. One device call (~7 min).
# Run 5's probes: taking the decode, the scale multiply or an HMMA out of the 2-tile body did not make its gate/up
# faster (653 us base; 596-713 us without them; p7, with almost no arithmetic, 692 us at 70 % of DRAM), while the
# compute-free stream probe reads at 98.8 % (v13). What the probes kept is the activation traffic: 8 LDG.128 per
# lane per chunk, ~4 KB per warp per 2.3 KB weight chunk, 57 % from L2.
# (1) test_moe_gpu on base and on xb (MOE_XB2: the 2-tile forms read their activations from the block's shared-memory
#     stage, XB; every 2-tile case of the test takes it), with the time the test needs.
# (2) The probe without the activation reloads (p8: every chunk multiplies the item's first two chunks' fragments),
#     with nothing but the weight stream and one HMMA (p15), p7 again, and xb: the 2-tile gate/up alone at 512 under
#     ncu with the bytes L2 sends to the SMs (l1tex__m_xbar2l1tex_read_bytes) and L2's own throughput; the fused 1-tile
#     kernel at 64 (96 % of the ceiling alone) for comparison.
# (3) base against xb, batches 128-512 random and skewed, two rounds.
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run1.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base: xb:-DMOE_XB2=1 p8:-DMOE_PROBE=8 p15:-DMOE_PROBE=15 p7:-DMOE_PROBE=7" \
  TESTS="base xb" TEST_TIMEOUT=300 ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -E "^test|did not build|^== (base|xb)"
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,l1tex__t_sector_hit_rate.pct,lts__t_sectors_op_read.sum.per_second,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second"
for spec in base:512:_Z9k_gate_upILi0ELi2ELi0ELi0E xb:512:_Z9k_gate_upILi0ELi2ELi0ELi1E p8:512:_Z9k_gate_upILi0ELi2ELi0ELi0E \
            p15:512:_Z9k_gate_upILi0ELi2ELi0ELi0E p7:512:_Z9k_gate_upILi0ELi2ELi0ELi0E base:64:_Z10k_experts1ILi0ELi2ELi0E; do
  n=${spec%%:*} r=${spec#*:} b=${r%%:*} k=${r#*:}
  timeout 60 ncu --clock-control none --kernel-name-base mangled -k regex:"$k" -c 1 --metrics "$M" \
    /tmp/moe-ab/$n/sluice-bench moe --batches $b --reps 1 --routing random > $OUT/ncu-$n-$b.txt 2>&1
  echo "== $n $b $k"; grep -E "dram__|gpu__time|inst_issued|xbar2l1tex|hit_rate|lts__" $OUT/ncu-$n-$b.txt | awk '{print "  ", $1, $(NF-1), $NF}'
done
for r in 1 2; do for n in base xb; do
  timeout 120 /tmp/moe-ab/$n/sluice-bench moe --batches 128,256,512 --reps 12 --stages > $OUT/bench-$n-$r.log 2>&1
done; done
for n in base xb; do for r in 1 2; do echo "$n/$r: $(grep -E '^ +[0-9]+ +(random|skewed)' $OUT/bench-$n-$r.log | awk '{printf "%s %s %s; ", $1, $2, $3}')"; done; done
cd $OUT && tar czf run1.tgz --remove-files ncu-*.txt test-*.log bench-*.log

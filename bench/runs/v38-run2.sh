#!/usr/bin/env bash
# v38 run 2 (bench/NOTES.md v38 (2)): why GW's gate/up runs at ~40 % of the tensor rate whatever its form (run 1: alone
# at 512 82.8 / 85.6 / 81.5 us for GW 1 / 2 / 3, and the same per-step time with 32 blocks at 256 as with 64 at 512).
# ncu on the gate/up alone (FK 0) at 512, GW 1 and GW 3: time, tensor pipe, L2 -> L1 and shared-memory traffic, stalls.
source bench/runs/lib.sh
[ -x $N/sluice-bench ] || build_new | cut -c1-200
M="gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
for gw in 1 3; do
  V=$(variant FK=0 GW=$gw)
  timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:'_Z16k_shared_gemm_wgILi1E' -c 1 --metrics "$M" \
    $N/sluice-bench moe --batches 512 --reps 1 --routing random --variants "$V" > $OUT/ncu-gw$gw.txt 2>&1
  echo "== ncu GW $gw gate/up at 512 alone"
  grep -E "duration|gmma|sm__throughput|xbar2l1tex|lts__t_bytes|dram__bytes|wavefronts|bank_conflicts|inst_executed|cycles_elapsed|hit_rate" $OUT/ncu-gw$gw.txt | awk '{print "  ",$1,$(NF-1),$NF}'
  grep -E "issue_stalled" $OUT/ncu-gw$gw.txt | awk '{print $NF, $1}' | sort -rn | head -6 | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{print "  ",$0}'
done

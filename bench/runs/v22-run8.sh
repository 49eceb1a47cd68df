#!/usr/bin/env bash
# v22 run 8 (bench/NOTES.md v22 (10)), session 13. One device call (~1 min).
# Instructions per byte of the 1-tile and the 2-tile gate/up at batch 512 (random), each alone under ncu: executed
# instructions, DRAM bytes read, and the executed-instruction mix by opcode (InstructionStats).
# Run from the repo root on the GPU machine (nothing to carry); files in $OUT (run8.tgz).
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}
VARIANTS="base:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh > /dev/null 2>&1
timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:"_Z9k_gate_upILi0ELi[12]E" -c 2 \
  --section InstructionStats --metrics smsp__inst_executed.sum,dram__bytes_read.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_pipe_lsu.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active \
  --print-details all /tmp/moe-ab/base/sluice-bench moe --batches 512 --reps 1 --routing random > $OUT/ncu-mix.txt 2>&1
grep -E "^  [a-z_]|inst_executed|dram__bytes|pipe_|inst_issued" $OUT/ncu-mix.txt | cut -c1-130
sed -n '/Instruction Statistics/,/^    ---- /p' $OUT/ncu-mix.txt | head -5
grep -E "^ +(IMAD|LOP3|SHF|HMMA|HMUL2|LDG|LDS|LDGSTS|PRMT|IADD3|FFMA|ISETP|BRA|MOV|F2FP|LEA|FMUL|SEL|IMNMX|BAR|DEPBAR|S2R|CS2R)\b" $OUT/ncu-mix.txt | head -60
cd $OUT && tar czf run8.tgz --remove-files ncu-mix.txt

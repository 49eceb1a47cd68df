#!/usr/bin/env bash
# v40 run 1 (bench/NOTES.md v40 (2)): SCL, the scale codes of an even k32 block stored where its factors need them
# (MOE_SCL 1: one LOP3 gives the block's two bf16x2 factors instead of a shift and a LOP3; an odd block keeps a rotate
# and a LOP3), against v39's byte layout (MOE_SCL 0). Builds both; counts the SASS of the three hot FP4 kernels (the
# fused 1-tile k_experts1, the 2-tile gate/up and 128-row down without the FP8 branch); runs the FP4 test cases on the
# new layout (as run, that step passed tests() the folder, not the binary, so no case ran: rc 126); then the layer at
# 1-512 random, one process per build in the order old new new old. No carry.
source bench/runs/lib.sh
VARIANTS="old:-DMOE_SCL=0 new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file" | cut -c1-200
for n in old new; do
  for fn in _Z10k_experts1ILi0ELi2ELi0EEv15moe_expert_argsPKtPKiS4_PKfPt _Z9k_gate_upILi0ELi2ELi0EEv15moe_expert_argsPKtPKiS4_PKfPt \
            _Z6k_downILi0ELi2ELi2ELi0EEv15moe_expert_argsPKtPKiPf; do
    f=$OUT/sass-$n-${fn:3:10}.txt
    cuobjdump -sass -fun $fn /tmp/moe-ab/$n/moe_expert.o > $f 2>&1
    echo "sass $n ${fn:3:24}: $(grep -cE '^ +/\*[0-9a-f]+\*/ ' $f) instructions; $(bash bench/sass_hist.sh $f 9 | tr -s ' ' | tr '\n' ' ')"
  done
done
tests /tmp/moe-ab/new new "V4-Flash dims" "mxfp4" "wide experts" "nvfp4, experts with" "one expert launch"
procs 0 "--batches 1,8,64,128,256,512 --routing random --reps 8" old new new old
grep -m1 ceiling $OUT/b1-old.log
echo "(us unqueued/queued@MHz: old new new old)"
table $OUT/b1-old.log $OUT/b2-new.log $OUT/b3-new.log $OUT/b4-old.log

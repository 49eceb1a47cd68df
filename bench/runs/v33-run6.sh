#!/usr/bin/env bash
# v33 run 6 (bench/NOTES.md v33 (6)): the one expert launch releasing the combine right after its wait on the lists
# (moe_cuda_ws.fs_cmb_early_max_t, bench field CE; moe_expert_args.fuse_early), so the combine's blocks take the SMs
# the launch's drain frees and read inv before their own wait (moe_combine inv_ready). Why: at 1-8 the combine ends
# 2.3-3.3 us after the expert launch (the stage traces of a1a6500): its launch, its wait and two dependent round trips.
# Prediction: 1-8 -0.5..1.5 us. Builds new; its test cases for it; one process B CE B CE at 1, 2, 4, 8. No carry.
# (Ran with CE's default 0; from the commit after it the default is 8, so B here is `variant CE=0` to rerun it.)
source bench/runs/lib.sh
build_new | cut -c1-120
timeout 60 env MOE_TEST_ONLY="combine released early" $N/test_moe_gpu > $OUT/t-ce.log 2>&1
echo "test 'combine released early': rc $? $(tail -1 $OUT/t-ce.log) ($(grep -c rel_l2 $OUT/t-ce.log) cases)"; grep FAIL $OUT/t-ce.log | head -3
B=$(variant CE=0) C=$(variant CE=8)
timeout 90 $N/sluice-bench moe --batches 1,2,4,8 --reps 8 --stages --variants "$B/$C/$B/$C" > $OUT/ce.log 2>&1
echo "== B CE B CE:$(row $OUT/ce.log)"
grep -hE "stages (1|8) random" $OUT/ce.log | cut -c1-200

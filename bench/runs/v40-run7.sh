#!/usr/bin/env bash
# v40 run 7 (bench/NOTES.md v40 (5)): is the SM clock what moves random 512 between 1.2 and 1.6 ms (v40 (3))? With
# SLUICE_BENCH_SPREAD=1 each row also replays once beside a one-thread clock probe on a side stream (sm_mhz_during:
# clock64 against the global timer over 80 % of the reading) and prints that clock beside the one sampled after the
# reading drained (the JSON's sm_mhz). Batch lists as run 6's: 512 first and last, the committed list, 256-512 alone.
source bench/runs/lib.sh
build_new | cut -c1-160
one() {
  echo "== $*"
  SLUICE_BENCH_SPREAD=1 timeout 200 $N/sluice-bench moe --routing random --reps 12 "$@" 2>&1 |
    grep -E "^  clock (64|128|256|512) |^ +(64|128|256|512) +random"
}
one --batches 512,1,4,8,16,32,64,128,256,512
one --batches 1,4,8,16,32,64,128,256,512
one --batches 256,512

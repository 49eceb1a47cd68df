#!/usr/bin/env bash
# v40 run 8 (bench/NOTES.md v40 (5)): sm_mhz_now waiting for its probe (the clock after a reading is no longer the
# previous sample) and the JSON's new sm_mhz_during, on the committed batch list and a short one.
source bench/runs/lib.sh
build_new | cut -c1-160
SLUICE_BENCH_SPREAD=1 timeout 200 $N/sluice-bench moe --routing random --reps 12 --batches 1,64,256,512 --out $OUT/m.json 2>&1 |
  grep -E "^  clock|^ +[0-9]+ +random"
python3 -c "import json; [print('json', r['batch'], r['ms'], r['sm_mhz'], r['sm_mhz_during']) for r in json.load(open('$OUT/m.json'))['rows'] if r['routing'] == 'random']"
SLUICE_BENCH_SPREAD=1 timeout 200 $N/sluice-bench moe --routing random --reps 12 --batches 1,4,8,16,32,64,128,256,512 --sustain 4 2>&1 |
  grep -E "^  clock (64|128|256|512) |^ +(64|128|256|512) +random|sustain (256|512)"

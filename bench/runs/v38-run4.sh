#!/usr/bin/env bash
# v38 run 4 (bench/NOTES.md v38 (4)): the committed run's test_moe_gpu (bench/runs/v32-run5.sh 78bdb6d) reached its
# 300 s limit in the hidden-2048 block (403 cases passed, none failed); the cases after that point, by name.
source bench/runs/lib.sh
build_new | cut -c1-200
tests $N/test_moe_gpu new "hidden 2048" "V4-Flash dims"

#!/usr/bin/env bash
# v41 run 5 (bench/NOTES.md v41 (4)): run 4 again with the probe's copy fixed (run 4 printed 0: a float copied into a
# double), batches 4 and 16 added: the layer's energy under sustained load, and the one-thread clock probe beside
# NVML's clock over the same 3 s.
bash bench/runs/v41-run4.sh

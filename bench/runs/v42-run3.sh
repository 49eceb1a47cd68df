#!/usr/bin/env bash
# v42 run 3 (bench/NOTES.md v42 (3)): the layer against the PyTorch peer under sustained load, in one call: the peer's
# graphs back to back for 2 s per row under NVML's energy counter (bench/moe_peer.py --power, new), beside sluice-bench
# moe --power at the same rows (ours, then the peer, then ours), so the peer ratio is read in bursts (the JSON's) and
# sustained, in time and in joules per layer.
source bench/runs/lib.sh
build_new > /dev/null
B="8,64,256"
timeout 100 $N/sluice-bench moe --batches $B --routing random --reps 4 --power 2000 > $OUT/o1.log 2>&1; echo "ours 1 rc $?"
timeout 240 python3 bench/moe_peer.py --batches $B --reps 3 --power 2000 --out $OUT/peer.txt > $OUT/peer.log 2>&1
echo "peer rc $?"; grep -vE "skewed" $OUT/peer.log
timeout 100 $N/sluice-bench moe --batches $B --routing random --reps 4 --power 2000 --peer $OUT/peer.txt > $OUT/o2.log 2>&1
echo "ours 2 rc $?"
for f in $OUT/o1.log $OUT/o2.log; do
  echo "== $(basename $f) $(grep -oE 'ceiling [0-9.]+' $f)"
  awk '/^ +[0-9]+ +random/{b[$1]=$3; x[$1]=$8} /^  power read/{print "  ", $0} /^  power [0-9]+ random/{t=$2; printf "   %s burst %.4f ms (x peer %s) | sustained %s ms, %s W, %s J per replay, %s pJ/B, NVML %s MHz\n", t, b[t], x[t], $9, $14, $16, $20, $25}' $f
done

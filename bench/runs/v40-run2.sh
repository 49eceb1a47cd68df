#!/usr/bin/env bash
# v40 run 2 (bench/NOTES.md v40 (2)): right after run 1 on the same machine (its binaries in /tmp/moe-ab): the SASS of
# the fused 1-tile kernel k_experts1<0,2,0> (run 1's cuobjdump -fun did not find it) and a second bench round in the
# order new old old new.
source bench/runs/lib.sh
for n in old new; do
  cuobjdump -sass /tmp/moe-ab/$n/moe_expert.o | awk '/Function : /{f = ($0 ~ /k_experts1ILi0ELi2ELi0E/)} f' > $OUT/sx-$n.txt
  echo "sass $n k_experts1<0,2,0>: $(grep -cE '^ +/\*[0-9a-f]+\*/ ' $OUT/sx-$n.txt) instructions; $(bash bench/sass_hist.sh $OUT/sx-$n.txt 10 | tr -s ' ' | tr '\n' ' ')"
done
procs 4 "--batches 1,8,64,128,256,512 --routing random --reps 8" new old old new
grep -m1 ceiling $OUT/b5-new.log; echo "(new old old new)"; table $OUT/b5-new.log $OUT/b6-old.log $OUT/b7-old.log $OUT/b8-new.log

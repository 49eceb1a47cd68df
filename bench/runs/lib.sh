# Helpers sourced by bench/runs/v30-*.sh and later run scripts (earlier scripts carry their own copies; each is the
# exact command of a NOTES entry and stays as it ran). Source from the repo root on the GPU machine.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}; mkdir -p "$OUT"
N=/tmp/moe-ab/new   # what build_new builds: test_moe_gpu and sluice-bench of the working tree
# build_new: the working tree's test_moe_gpu and sluice-bench (bench/moe_ab.sh, no test, no bench round)
build_new() { VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"; }
# row LOG: each reading of a `sluice-bench moe --variants` log as " vV BATCH{r|s} ms/queued@MHz;"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
# variant FIELD=VALUE ...: the default --variants entry (sluice-bench's dflt) with the named fields set, e.g.
# `variant TL=8 SH=16`; the field names are VARIANTS_USAGE's
variant() {
  local names="E R L K KT F TC OV SH FK DY DM NO PF PM PD FU FM TL SP FS KG KX KH SR ES T1 TT TN TX TM TG TA SX SW SF SN X4 XT XE TB LR LG"
  local vals="1 16 33 4 16 0 8 0 9 1 1 320 0 0 8 24 3 9 4 0 8 2 1 4 2 4 16 128 64 0 9 4 512 512 0 1 512 224 32 1 1073741824 1073741824 0"
  local -a n=($names) v=($vals); local kv i
  for kv in "$@"; do
    for i in "${!n[@]}"; do [ "${n[$i]}" = "${kv%%=*}" ] && v[$i]=${kv#*=}; done
  done
  local IFS=,; echo "${v[*]}"
}

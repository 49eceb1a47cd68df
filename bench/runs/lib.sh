# Helpers sourced by bench/runs/v30-*.sh and later run scripts (earlier scripts carry their own copies; each is the
# exact command of a NOTES entry and stays as it ran). Source from the repo root on the GPU machine.
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/moe-ab-out}; mkdir -p "$OUT"
N=/tmp/moe-ab/new   # what build_new builds: test_moe_gpu and sluice-bench of the working tree
# build_new: the working tree's test_moe_gpu and sluice-bench (bench/moe_ab.sh, no test, no bench round)
build_new() { VARIANTS="new:" TESTS="none" ROUNDS=0 bash bench/moe_ab.sh 2>&1 | grep -vE "^NVIDIA|^batch routing|No such file"; }
# row LOG: each reading of a `sluice-bench moe --variants` log as " vV BATCH{r|s} ms/queued@MHz;"
row() { awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{printf " v%d %s%s %s/%s@%s;", v, $1, substr($2,1,1), $3, $9, $(NF-1)}' "$1"; }
# table LOG...: one line per batch and routing of `sluice-bench moe --variants` logs, every variant's reading in turn as
# " us_unqueued/us_queued@MHz"
table() {
  cat "$@" | awk '/^variant:/{v++} /^ +[0-9]+ +(random|skewed)/{k=$1 substr($2,1,1); r[k]=r[k] sprintf(" %.1f/%.1f@%s", $3*1000, $9*1000, $(NF-1)); if(!(k in o)){o[k]=++n; key[n]=k}} END{for(i=1;i<=n;i++) print key[i], r[key[i]]}'
}
# variant FIELD=VALUE ...: the default --variants entry with the named fields set, e.g. `variant TL=8 SH=16`; the
# defaults and field names come from `sluice-bench moe --default-variant` (of $N, or $SB), so build first
variant() {
  local -a kv=($("${SB:-$N/sluice-bench}" moe --default-variant)) out=(); local a i
  for a in "$@"; do
    for i in "${!kv[@]}"; do [ "${kv[$i]%%=*}" = "${a%%=*}" ] && kv[$i]=$a; done
  done
  for i in "${!kv[@]}"; do out+=("${kv[$i]#*=}"); done
  local IFS=,; echo "${out[*]}"
}
# tests BIN TAG NAME...: BIN's test_moe_gpu cases whose names hold each NAME (MOE_TEST_ONLY), one log per NAME in $OUT,
# a line with its exit code, last line and case count, and its first failures
tests() {
  local bin=$1 tag=$2 o f; shift 2
  for o in "$@"; do
    f="$OUT/t-$tag-${o%% *}.log"
    timeout 150 env MOE_TEST_ONLY="$o" "$bin" > "$f" 2>&1
    echo "test $tag '$o': rc $? $(tail -1 "$f") ($(grep -c rel_l2 "$f") cases)"; grep FAIL "$f" | head -5
  done
}
# procs I0 "ARGS" NAME...: one `sluice-bench moe ARGS` process per NAME in turn, each with /tmp/moe-ab/NAME's build (the
# order is the A/B's: e.g. old new new old), logs $OUT/bI-NAME.log numbered from I0 + 1, and a line with each exit code
procs() {
  local i=$1 args=$2 n; shift 2
  for n in "$@"; do
    i=$((i + 1))
    timeout 110 /tmp/moe-ab/$n/sluice-bench moe $args > $OUT/b$i-$n.log 2>&1
    echo "bench $i $n: rc $?"
  done
}

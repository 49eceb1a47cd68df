#!/bin/sh
# sluice-tokenize's command-line contract: JSON lines in, JSON lines out; bad lines named.
#   cli_test.sh PATH/TO/sluice-tokenize DATA_DIR
set -eu
BIN=$1
TOK=$2/tokenizer.json
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# special tokens in the text are matched; U+0000 survives; empty string -> []
printf '%s\n' '"<｜User｜>hi<｜Assistant｜>"' '""' '"a\u0000b"' > "$T/in"
"$BIN" --tokenizer "$TOK" --encode < "$T/in" > "$T/ids" || fail "encode exit $?"
[ "$(wc -l < "$T/ids")" -eq 3 ] || fail "encode: expected 3 lines"
head -1 "$T/ids" | grep -q '^\[2,.*,3\]$' || fail "special tokens not matched: $(head -1 "$T/ids")"
[ "$(sed -n 2p "$T/ids")" = "[]" ] || fail "empty string"
"$BIN" --tokenizer "$TOK" --decode < "$T/ids" > "$T/out" || fail "decode exit"
cmp -s "$T/in" "$T/out" || { diff "$T/in" "$T/out" >&2; fail "decode(encode(x)) != x"; }

# --add-special: the ByteLevel post-processor adds nothing
"$BIN" --tokenizer "$TOK" --encode --add-special < "$T/in" | cmp -s - "$T/ids" || fail "--add-special"

# invalid UTF-8 from ids -> U+FFFD; unknown ids skipped
printf '[70, 127, 70]\n[999999]\n' > "$T/bad_ids"
"$BIN" --tokenizer "$TOK" --decode < "$T/bad_ids" > "$T/bad_out" || fail "decode of odd ids"
[ "$(sed -n 2p "$T/bad_out")" = '""' ] || fail "unknown id not skipped: $(sed -n 2p "$T/bad_out")"

# bad JSON on line 2 -> non-zero exit, message names the line
printf '"ok"\n[1,2\n"never"\n' > "$T/badjson"
if "$BIN" --tokenizer "$TOK" --encode < "$T/badjson" > "$T/o" 2> "$T/e"; then fail "bad JSON accepted"; fi
grep -q 'line 2' "$T/e" || fail "error does not name line 2: $(cat "$T/e")"
printf '[1,2]\n[1,-5]\n' > "$T/badids"
if "$BIN" --tokenizer "$TOK" --decode < "$T/badids" > "$T/o" 2> "$T/e"; then fail "negative id accepted"; fi
grep -q 'line 2' "$T/e" || fail "decode error does not name line 2"
if "$BIN" --tokenizer /nonexistent/tokenizer.json --encode < /dev/null 2> "$T/e"; then fail "missing file accepted"; fi
"$BIN" --help | grep -q -- --encode || fail "--help"
echo ok

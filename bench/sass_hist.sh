#!/usr/bin/env bash
# Opcode histogram of a cuobjdump -sass listing (modifiers dropped: HMMA.16816.F32.BF16 -> HMMA), most
# frequent first, N lines (default 25). Used by moe_ab.sh and moe_device_run.sh (SASS_FN).
#   bash bench/sass_hist.sh FILE [N]
grep -oE '^ +/\*[0-9a-f]+\*/ +[A-Z0-9_.]+' "$1" | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -"${2:-25}"

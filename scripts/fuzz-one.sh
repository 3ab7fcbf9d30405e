#!/usr/bin/env bash
# Runs one libFuzzer target: fuzz-one.sh EXE SECONDS WORKDIR SEEDS REGRESSIONS [DICT]
# New corpus entries go to WORKDIR/corpus (the committed seeds are read only); a crash leaves
# WORKDIR/crash-* (copy it to fuzz/regressions/<target>/ once fixed). Prints the final
# execution count and coverage, and exits non-zero on a crash, a leak-free OOM or a timeout.
set -euo pipefail
exe=$1 secs=$2 work=$3 seeds=$4 regress=$5 dict=${6:-}
mkdir -p "$work/corpus"
args=(-max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=20
      -max_len=1048576 -print_final_stats=1 -artifact_prefix="$work/")
[ -n "$dict" ] && [ -f "$dict" ] && args+=(-dict="$dict")
dirs=("$work/corpus" "$seeds")
[ -d "$regress" ] && dirs+=("$regress")
set +e
"$exe" "${args[@]}" "${dirs[@]}" > "$work/log.txt" 2>&1
rc=$?
set -e
name=$(basename "$exe")
execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/log.txt" | tail -1 | awk '{print $2}')
cov=$(grep -oE '(DONE|pulse|REDUCE|NEW|INITED) +cov: [0-9]+ ft: [0-9]+' "$work/log.txt" | tail -1 | awk '{print $3, "ft", $5}')
echo "$name: ${secs}s, execs ${execs:-?}, cov ${cov:-?}, corpus $(ls "$work/corpus" | wc -l) new files, exit $rc"
if [ $rc -ne 0 ]; then tail -40 "$work/log.txt"; fi
exit $rc

#!/usr/bin/env bash
# Reruns every `pldr bench` command of the README's Results table and prints its figures next to
# the README's: tokens/s and the fraction of the limit measured in the same run. No pass or fail:
# speed is not a test (machines of our kind differ up to 3x; compare the fractions).
#
#   scripts/check-results.sh [PLDR_BINARY] [README]     (defaults: build/pldr, README.md)
#
# A row of the table counts when its last cell is a backticked `pldr bench ...` command that runs
# one workload; its second cell is the tokens/s and its third the fraction ("0.69 of SGEMM").
set -euo pipefail
cd "$(dirname "$0")/.."
PLDR=${1:-build/pldr}
README=${2:-README.md}
[ -x "$PLDR" ] || { echo "check-results: $PLDR is not an executable (build first)" >&2; exit 1; }
[ -f "$README" ] || { echo "check-results: no $README" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The rows: workload | tok/s | fraction | command.
/usr/bin/python3 - "$README" >"$tmp/rows" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
start = text.find("\n## Results")
if start < 0:
    sys.exit("check-results: the README has no ## Results section")
end = text.find("\n## ", start + 1)
for line in text[start:end if end > 0 else len(text)].splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 4:
        continue
    m = re.fullmatch(r"`pldr (bench [^`]*)`", cells[-1])
    if m:
        print("\t".join([cells[0], cells[1], cells[2], m.group(1)]))
EOF
[ -s "$tmp/rows" ] || { echo "check-results: no \`pldr bench\` rows in $README's Results" >&2; exit 1; }

printf '%-36s %12s %12s %16s %16s\n' "workload" "README tok/s" "now tok/s" "README fraction" "now fraction"
while IFS=$'\t' read -r name tps frac cmd; do
  # shellcheck disable=SC2086  # the command's words, as the README writes them
  if ! "$PLDR" $cmd --output json >"$tmp/out.json" 2>"$tmp/err"; then
    printf '%-36s %12s %12s  (failed: %s)\n' "$name" "$tps" "-" "$(tail -1 "$tmp/err")"
    continue
  fi
  now=$(/usr/bin/python3 - "$tmp/out.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
if len(r) != 1:
    sys.exit("the command ran %d workloads, not one" % len(r))
r = r[0]
bound = {"read": "read", "sgemm": "SGEMM", "bf16 gemm": "bf16"}.get(r.get("bound", ""), r.get("bound", ""))
print("%s\t%.2f of %s" % (format(round(r["tok_s"]["median"]), ","), r["fraction"], bound))
EOF
)
  printf '%-36s %12s %12s %16s %16s\n' "$name" "$tps" "${now%%$'\t'*}" "$frac" "${now#*$'\t'}"
done <"$tmp/rows"
echo "(pldr bench measures the limits next to its repetitions; --threads 2 unless the command says)"

#!/usr/bin/env bash
# Screenshot a pldr audit report with Debian's headless Chromium:
#   scripts/screenshot-report.sh OUT_DIR/report.html OUT.png [WIDTHxHEIGHT]
# Install the browser with `PLDR_WITH_BROWSER=1 scripts/install-deps.sh` (or apt-get install -y
# chromium). The page is self-contained, so the browser runs with networking features off.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTHxHEIGHT]" >&2
  exit 1
fi
report=$1
out=$2
size=${3:-1400x2400}
[ -f "$report" ] || { echo "$0: $report: no such file" >&2; exit 1; }
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "$0: chromium not found (PLDR_WITH_BROWSER=1 scripts/install-deps.sh)" >&2; exit 1; }
abs_report=$(cd "$(dirname "$report")" && pwd)/$(basename "$report")
case "$out" in /*) abs_out=$out ;; *) abs_out=$(pwd)/$out ;; esac
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --hide-scrollbars --user-data-dir="$profile" --screenshot="$abs_out" \
  --window-size="${size/x/,}" "file://$abs_report" >/dev/null 2>&1 || true
[ -s "$abs_out" ] || { echo "$0: chromium wrote no screenshot" >&2; exit 1; }
echo "wrote $abs_out"

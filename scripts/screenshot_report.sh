#!/usr/bin/env bash
# Render a kvsched HTML report to PNG with headless Chromium (Debian package `chromium`).
#
#   scripts/screenshot_report.sh REPORT.html OUT.png [WIDTH] [HEIGHT]
#
# WIDTH x HEIGHT is the viewport in CSS pixels (default 1280 x 2400: the headline, the gain
# decomposition and the latency plots). A fresh profile directory is used and removed each time,
# and background networking is off, so the render shows only what the file itself contains.
# The browser log goes to OUT.png.console.log. A report has no script, so any page console
# message (an uncaught error, a failed resource load) fails the run.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTH] [HEIGHT]" >&2
  exit 2
fi
report=$1
out=$2
width=${3:-1280}
height=${4:-2400}
[[ -f "$report" ]] || { echo "no such report: $report" >&2; exit 2; }

browser=""
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then browser=$name; break; fi
done
[[ -n "$browser" ]] || { echo "chromium not found: apt-get install -y chromium" >&2; exit 2; }

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
url="file://$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
mkdir -p "$(dirname "$out")"
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
log="$out_abs.console.log"

"$browser" --headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run \
  --disable-component-update --disable-sync --user-data-dir="$profile" \
  --hide-scrollbars --window-size="$width,$height" --enable-logging=stderr --v=0 \
  --screenshot="$out_abs" "$url" 2>"$log" >/dev/null || true

[[ -s "$out_abs" ]] || { echo "no screenshot written; see $log" >&2; exit 1; }
# Page console messages appear as ":CONSOLE" lines (Chromium logs them all at INFO level).
if grep -E ':CONSOLE|Uncaught|Failed to load resource' "$log" >/dev/null; then
  echo "console messages while rendering $report:" >&2
  grep -E ':CONSOLE|Uncaught|Failed to load resource' "$log" >&2
  exit 1
fi
echo "screenshot: $out ($width x $height)"

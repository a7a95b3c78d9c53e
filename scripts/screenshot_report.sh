#!/usr/bin/env bash
# Screenshot a run's report.html in headless Chromium (offline: no network, no GPU, throwaway profile).
#
#   scripts/screenshot_report.sh RUN_DIR [OUT.png]      default OUT.png: RUN_DIR/report.png
#
# The browser is $CHROMIUM, else the first of chromium, chromium-browser, google-chrome on PATH.
# Prints the screenshot's path; exits 2 on bad input, 1 when the browser produced no image.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 RUN_DIR [OUT.png]" >&2
  exit 2
fi
run_dir=$1
if [[ ! -f "$run_dir/report.html" ]]; then
  echo "error: $run_dir/report.html not found (not a run directory? run \`tdlab report $run_dir\`)" >&2
  exit 2
fi
browser=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [[ -z "$browser" ]]; then
  echo "error: no Chromium found; install it or set CHROMIUM=/path/to/chromium" >&2
  exit 2
fi

report=$(cd "$run_dir" && pwd -P)/report.html
out=${2:-$run_dir/report.png}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd -P)/$(basename "$out")
url="file://${report// /%20}"

profile=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$profile" "$log"' EXIT
rm -f "$out"

limit=()
if command -v timeout >/dev/null; then limit=(timeout 120); fi
"${limit[@]}" "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --screenshot="$out" --window-size=1200,1600 "$url" >"$log" 2>&1 || true

if [[ ! -s "$out" ]]; then
  echo "error: $browser wrote no screenshot; its output:" >&2
  cat "$log" >&2
  exit 1
fi
echo "$out"

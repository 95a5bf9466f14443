#!/usr/bin/env bash
# check_explain_html.sh GLASS DOM_CHECK OUT_DIR — the attention explorer in a real browser.
#
# 1. Finds Debian's chromium, installing it with apt-get when missing.
# 2. Proves the browser can run headless here (a tiny page whose script marks the DOM).
# 3. Runs `glass explain --json --html`, opens the page as page.html#click=N&layer=L (the page
#    dispatches real clicks on token N and on layer L's button once loaded), dumps the DOM after the
#    scripts ran, and has DOM_CHECK compare the heatmap, the GQA groups, the query x key triangles,
#    the KV-cache chart and the top-5 bars with the --json output. Done greedy for a prompt token
#    (its row came from the prefill) and a generated one (a decode step), and once sampled (the
#    bars then carry the draw's distribution too).
# 4. Saves a screenshot to OUT_DIR/explain.png.
#
# Exit: 0 passed; 1 failed; 77 skipped (chromium cannot be installed or cannot run headless), which
# ctest reports as "Skipped" (SKIP_RETURN_CODE 77), never as passed.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/chromium.sh"  # reads the arguments; find_browser, run_browser

# 1. The browser.
if ! browser=$(find_browser); then
  echo "chromium is not installed (dpkg -s chromium: $(dpkg -s chromium 2>&1 | head -1)); installing it"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo_cmd=(sudo -n); else
      echo "SKIPPED: chromium is missing and this user cannot run apt-get"
      exit $SKIP
    fi
  fi
  apt_log="$out/apt.log"
  # Another apt-get may hold the lock (a parallel install): wait for it rather than fail.
  if ! { timeout 900 "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq &&
         DEBIAN_FRONTEND=noninteractive timeout 900 "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 \
           install -y -qq chromium; } >"$apt_log" 2>&1; then
    echo "SKIPPED: apt-get could not install chromium (log: $apt_log):"
    tail -n 3 "$apt_log"
    exit $SKIP
  fi
  if ! browser=$(find_browser); then
    echo "SKIPPED: apt-get succeeded but no chromium binary is on PATH"
    exit $SKIP
  fi
fi

# 2. Can it run headless here at all? If not, the environment (not the page) is the problem.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
require_headless_browser

# 3. The page, clicked, against --json.
prompt="Once upon a time"  # 5 tokens: positions 0-4 come from the prefill, 5.. from decode steps
if ! "$glass" explain -p "$prompt" -n 6 --json --html "$out/explain.html" >"$out/explain.txt"; then
  echo "FAILED: glass explain did not run"
  exit 1
fi
tail -n 1 "$out/explain.txt" >"$out/explain.json"
if ! "$glass" explain -p "$prompt" -n 4 --temperature 0.9 --top-k 20 --top-p 0.95 --seed 11 --json \
       --html "$out/explain_sampled.html" >"$out/explain_sampled.txt"; then
  echo "FAILED: glass explain (sampled) did not run"
  exit 1
fi
tail -n 1 "$out/explain_sampled.txt" >"$out/explain_sampled.json"
status=0
# page  token  layer
for view in "explain 2 0" "explain 7 3" "explain_sampled 6 1"; do
  read -r page position layer <<<"$view"
  dom="$out/dom_${page}_click_${position}_layer_${layer}.html"
  if ! run_browser --dump-dom "file://$out/$page.html#click=$position&layer=$layer" >"$dom"; then
    echo "FAILED: chromium could not load the page (log: $out/chromium.log)"
    exit 1
  fi
  "$dom_check" "$out/$page.json" "$dom" "$position" "$layer" || status=1
done

# 4. The screenshot (look at it: it is the page a reader sees).
rm -f "$out/explain.png"
run_browser --window-size=1280,3000 --screenshot="$out/explain.png" "file://$out/explain.html#click=7&layer=3" >/dev/null
if [ "$(head -c 8 "$out/explain.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
  echo "FAILED: no PNG screenshot at $out/explain.png"
  status=1
else
  echo "screenshot: $out/explain.png ($(stat -c %s "$out/explain.png") bytes)"
fi
[ $status -eq 0 ] && echo "PASSED" || echo "FAILED"
exit $status

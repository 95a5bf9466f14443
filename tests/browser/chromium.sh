# chromium.sh — sourced by check_explain_html.sh and check_serve_page.sh: their arguments, finding
# Debian's chromium and running it headless. Reads the caller's arguments GLASS DOM_CHECK OUT_DIR
# into `glass`, `dom_check` and `out` (created, made absolute: the browser opens file://$out/...)
# and sets SKIP (77). The caller then sets `browser` (from find_browser) and `profile` (a fresh
# directory it removes on exit).
if [ $# -ne 3 ]; then
  echo "usage: $0 GLASS DOM_CHECK OUT_DIR" >&2
  exit 2
fi
glass=$1 dom_check=$2 out=$3
readonly SKIP=77
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The chromium binary on PATH, or status 1.
find_browser() {
  local b
  for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
  done
  return 1
}

# Headless, offline, no first-run work, the fresh profile. --no-sandbox: root in a container.
# Virtual time stands still while a fetch is pending, so a page's own requests finish within the
# budget. The browser's stderr goes to $out/chromium.log.
run_browser() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-quic \
    --no-first-run --disable-background-networking --disable-component-update --disable-sync \
    --disable-extensions --hide-scrollbars --user-data-dir="$profile" --virtual-time-budget=5000 "$@" \
    2>>"$out/chromium.log"
}

# Can it run a page headless here at all (a tiny page whose script marks the DOM)? If not, the
# environment (not the page under test) is the problem: exits with $SKIP.
require_headless_browser() {
  echo "browser: $browser ($("$browser" --version 2>/dev/null | head -1))"
  cat >"$out/smoke.html" <<'HTML'
<!doctype html><html><body><script>document.body.setAttribute("data-ran", "yes");</script></body></html>
HTML
  if ! run_browser --dump-dom "file://$out/smoke.html" | grep -q 'data-ran="yes"'; then
    echo "SKIPPED: $browser cannot run a page headless here (log: $out/chromium.log):"
    tail -n 3 "$out/chromium.log"
    exit $SKIP
  fi
}

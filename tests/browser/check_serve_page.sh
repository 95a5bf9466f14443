#!/usr/bin/env bash
# check_serve_page.sh GLASS DOM_CHECK OUT_DIR — glass serve's live page (GET /) in a real browser.
#
# 1. Finds Debian's chromium and proves it can run headless here (a tiny page whose script marks
#    the DOM); skips (77) when it is missing or cannot run.
# 2. Starts `glass serve --port 0 --api-key KEY` on loopback; checks that GET / needs no key and
#    names no URL outside the server (one self-contained document), that /v1/engine/state does.
# 3. Sends a two-turn chat (the second turn hits the prefix cache) and asks the API for the greedy
#    answer to "Once upon a time" (the expected answer).
# 4. Opens http://127.0.0.1:PORT/?ask=Once%20upon%20a%20time&max_tokens=40&key=KEY: the page sends
#    the same greedy request through its chat box while it polls the engine state (so the request
#    is in flight while the views update), then dumps the DOM. DOM_CHECK compares the streamed
#    answer with the API's, and the step view, the block grid (one cell per block:
#    glass_kv_blocks_total from /metrics) and the request table with /v1/engine/state.
# 5. Loads the page again while three long streams that share a prefix run on a second server
#    (a bigger random-weight shape, so they surely still run): DOM_CHECK --in-flight finds their
#    blocks in the grid, the shared ones marked, decodes in the step view, running requests in the
#    table. A screenshot of that view goes to OUT_DIR/serve_page.png.
#
# Exit: 0 passed; 1 failed; 77 skipped (no chromium, or it cannot run headless), which ctest
# reports as "Skipped" (SKIP_RETURN_CODE 77), never as passed.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/chromium.sh"  # reads the arguments; find_browser, run_browser
rm -f "$out"/*.html "$out"/*.json "$out"/*.txt "$out"/*.png

# 1. The browser.
if ! browser=$(find_browser); then
  echo "SKIPPED: chromium is not installed (Debian: apt-get install chromium)"
  exit $SKIP
fi
profile=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$profile"
}
trap cleanup EXIT
require_headless_browser

# 2. The server.
key="page-test-key"
"$glass" serve --port 0 --api-key "$key" --block-size 16 --threads 1 >"$out/server.out" 2>"$out/server.log" &
server_pid=$!
port=""
# 60 s at most: a hang guard, not a speed check (starting takes well under a second, but the
# machine may be busy with other tests); the same for the second server and the streams below.
for _ in $(seq 1 600); do
  port=$(sed -n 's|^listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$out/server.out")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "FAILED: glass serve did not start:"
  cat "$out/server.log"
  exit 1
fi
base="http://127.0.0.1:$port"
auth=(-H "Authorization: Bearer $key")
api() {  # api PATH [JSON]: GET, or POST the JSON, with the key; the body on stdout
  if [ $# -eq 2 ]; then
    curl -sS --max-time 20 "${auth[@]}" -H 'Content-Type: application/json' --data-binary "$2" "$base$1"
  else
    curl -sS --max-time 20 "${auth[@]}" "$base$1"
  fi
}
status=0
fail() { echo "FAILED: $*"; status=1; }

page_status=$(curl -sS --max-time 20 -o "$out/page.html" -w '%{http_code} %{content_type}' "$base/")
[ "$page_status" = "200 text/html; charset=utf-8" ] || fail "GET / without a key answered '$page_status'"
if grep -nE '(https?:)?//[a-zA-Z0-9.-]+\.[a-z]{2,}|(src|href)="[^"#]' "$out/page.html" | head -3 | grep .; then
  fail "the page refers to something outside itself (above)"
fi
state_status=$(curl -sS --max-time 20 -o /dev/null -w '%{http_code}' "$base/v1/engine/state")
[ "$state_status" = "401" ] || fail "GET /v1/engine/state without the key answered $state_status, not 401"

# 3. Some history for the views, and the expected answer.
system='You are a storyteller who tells short stories about animals in the forest.'
turn1="{\"temperature\": 0, \"max_tokens\": 30, \"messages\": [{\"role\": \"system\", \"content\": \"$system\"}, {\"role\": \"user\", \"content\": \"Tell me a story.\"}]}"
api /v1/chat/completions "$turn1" >"$out/turn1.json" || fail "turn 1 failed"
turn2="{\"temperature\": 0, \"max_tokens\": 30, \"messages\": [{\"role\": \"system\", \"content\": \"$system\"}, {\"role\": \"user\", \"content\": \"Tell me a story.\"}, {\"role\": \"assistant\", \"content\": \"Once.\"}, {\"role\": \"user\", \"content\": \"More!\"}]}"
api /v1/chat/completions "$turn2" >"$out/turn2.json" || fail "turn 2 failed"
ask="Once upon a time"
api /v1/chat/completions "{\"temperature\": 0, \"max_tokens\": 40, \"messages\": [{\"role\": \"user\", \"content\": \"$ask\"}]}" \
  >"$out/expected.json" || fail "the expected answer could not be had"

# 4. The page asks the same through its chat box; the DOM after its scripts ran.
url="$base/?ask=Once%20upon%20a%20time&max_tokens=40&key=$key"
if ! run_browser --dump-dom "$url" >"$out/dom.html"; then
  echo "FAILED: chromium could not load the page (log: $out/chromium.log)"
  exit 1
fi
api /metrics >"$out/metrics.txt" || fail "GET /metrics failed"
api /v1/engine/state >"$out/state.json" || fail "GET /v1/engine/state failed"
"$dom_check" "$out/state.json" "$out/metrics.txt" "$out/dom.html" "$out/expected.json" || status=1

# 5. With requests in flight: a second server with a bigger model shape (random weights, prompts
#    as token ids; ~10 ms a token), three long streams sharing a 48-token prefix, the page loaded
#    while they run. DOM_CHECK --in-flight: the grid holds their blocks, the shared ones marked,
#    the step view shows decodes, the table running requests.
kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null
"$glass" serve --port 0 --shape stories15M --context 2048 --block-size 16 --threads 1 >"$out/server2.out" 2>"$out/server2.log" &
server_pid=$!
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|^listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$out/server2.out")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAILED: glass serve --shape stories15M did not start:"; cat "$out/server2.log"; exit 1; }
base="http://127.0.0.1:$port"
prompt=$(seq -s, 100 147)  # [1, 100..147, i]: 50 ids; the first 48 (3 full blocks) are shared by all three
clients=()
for i in 1 2 3; do
  curl -sS -N --max-time 300 -H 'Content-Type: application/json' -o "$out/stream$i.txt" \
    --data-binary "{\"prompt\": [1,$prompt,$i], \"max_tokens\": 1990, \"ignore_eos\": true, \"temperature\": 0, \"stream\": true}" \
    "$base/v1/completions" 2>/dev/null &
  clients+=($!)
  for _ in $(seq 1 1200); do grep -q 'data: ' "$out/stream$i.txt" 2>/dev/null && break; sleep 0.05; done
done
live_url="$base/"
run_browser --dump-dom "$live_url" >"$out/dom_in_flight.html" || fail "chromium could not load the page in flight"
curl -sS --max-time 20 "$base/metrics" >"$out/metrics_in_flight.txt"
"$dom_check" --in-flight "$out/metrics_in_flight.txt" "$out/dom_in_flight.html" || status=1

# 6. The screenshot, still in flight (look at it: it is the page a reader sees).
run_browser --window-size=1400,1100 --screenshot="$out/serve_page.png" "$live_url" >/dev/null
if [ "$(head -c 8 "$out/serve_page.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
  fail "no PNG screenshot at $out/serve_page.png"
else
  echo "screenshot: $out/serve_page.png ($(stat -c %s "$out/serve_page.png") bytes)"
fi
kill "${clients[@]}" 2>/dev/null
wait "${clients[@]}" 2>/dev/null
[ $status -eq 0 ] && echo "PASSED" || echo "FAILED"
exit $status

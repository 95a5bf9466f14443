#!/usr/bin/env bash
# tests/dist/serve_roles.sh MPIRUN GLASS MODELS_DIR
# Disaggregated serving over processes, each side one process or a tensor-parallel grid:
#   mpirun -np 1 glass serve --role decode ... : -np 1 glass serve --role prefill ...
#   mpirun -np 2 glass serve --role decode --tp 2 ... : -np 2 glass serve --role prefill --tp 2 ...
# answers a completion with exactly glass generate's greedy text, each side reports what it did,
# and SIGTERM ends every process within seconds. Skipped (77) without curl.
set -euo pipefail
mpirun=$1 glass=$2 models=$3
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
work=$(mktemp -d)
trap 'kill -KILL "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
prompt="Lily and Ben went to the park"
model=(-m "$models/stories260K.bin" -t "$models/tok512.bin")

want=$("$glass" generate "${model[@]}" -p "$prompt" --max-new-tokens 40 --temperature 0 --json 2>/dev/null | tail -n 1 |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])')

# serve NP FLAGS...: NP processes per side, each given FLAGS; rank 0 decodes and serves (its
# first stdout line names the port), rank NP computes the prompts. Checks the served text.
serve() {
  local np=$1; shift
  "$mpirun" -np "$np" --oversubscribe --timeout 100 --mca btl self,vader "$glass" serve "${model[@]}" --port 0 --role decode "$@" \
      : -np "$np" "$glass" serve "${model[@]}" --role prefill "$@" >"$work/out" 2>"$work/err" &
  pid=$!
  for _ in $(seq 1 600); do grep -q '^listening on' "$work/out" 2>/dev/null && break; sleep 0.1; done
  url=$(sed -n 's/^listening on //p' "$work/out")
  [[ -n "$url" ]] || { echo "the decode rank did not start:"; cat "$work/err"; exit 1; }
  got=$(curl -s --max-time 60 "$url/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"$prompt\", \"temperature\": 0, \"max_tokens\": 40}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
  kill -TERM "$pid"
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then echo "mpirun still runs 30 s after SIGTERM"; cat "$work/err"; exit 1; fi
  cat "$work/err"
  [[ "$got" == "$want" ]] || { echo "served:    $got"; echo "generated: $want"; exit 1; }
}

serve 1 --threads 1
grep -q 'disaggregated: decode rank 0, prefill rank 1' "$work/err" || { echo "no startup line naming the roles"; exit 1; }
grep -q '\[rank 1, prefill\] 1 prompts' "$work/err" || { echo "rank 1 did not report its one prompt"; exit 1; }
grep -q '\[rank 0, decode\] 1 prompts prefilled by rank 1' "$work/err" || { echo "rank 0 did not report"; exit 1; }
echo "one process a side: served text == glass generate's; both ranks reported and ended"

# Each side a grid of 2 (tensor parallel): ranks 0-1 decode, 2-3 prefill; the prompt's rows are
# put together from ranks 2 and 3 and cut again for ranks 0 and 1 (dist/split_shipment.hpp).
serve 2 --tp 2
grep -q 'disaggregated: decode ranks 0-1, prefill ranks 2-3' "$work/err" || { echo "no startup line naming the grids"; exit 1; }
grep -q '\[rank 2, prefill\] 1 prompts' "$work/err" || { echo "rank 2 did not report its one prompt"; exit 1; }
grep -q '\[rank 0, decode\] 1 prompts prefilled by rank 2' "$work/err" || { echo "rank 0 did not report"; exit 1; }
# Each side's grid reports its ranks' forward passes and waiting (StageClock), numbered in the job.
grep -q '\[rank 3, prefill: stage 0, tensor rank 1\] [1-9][0-9]* forward passes' "$work/err" ||
  { echo "the prefill grid did not report its ranks' passes"; exit 1; }
grep -q '\[rank 1, decode: stage 0, tensor rank 1\] [1-9][0-9]* forward passes' "$work/err" ||
  { echo "the decode grid did not report its ranks' passes"; exit 1; }
echo "tp 2 a side: served text == glass generate's; both sides reported and ended"

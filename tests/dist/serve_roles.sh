#!/usr/bin/env bash
# tests/dist/serve_roles.sh MPIRUN GLASS MODELS_DIR
# Disaggregated serving over two processes:
#   mpirun -np 1 glass serve --role decode ... : -np 1 glass serve --role prefill ...
# answers a completion with exactly glass generate's greedy text, each rank reports what it did,
# and SIGTERM ends both processes within seconds. Skipped (77) without curl.
set -euo pipefail
mpirun=$1 glass=$2 models=$3
command -v curl >/dev/null || { echo "curl not found: skipped"; exit 77; }
work=$(mktemp -d)
trap 'kill -KILL "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
prompt="Lily and Ben went to the park"
model=(-m "$models/stories260K.bin" -t "$models/tok512.bin")

want=$("$glass" generate "${model[@]}" -p "$prompt" --max-new-tokens 40 --temperature 0 --json 2>/dev/null | tail -n 1 |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])')

# Rank 0 decodes and serves (its first stdout line names the port); rank 1 computes the prompts.
"$mpirun" -np 1 --timeout 100 --mca btl self,vader "$glass" serve "${model[@]}" --port 0 --threads 1 --role decode \
    : -np 1 "$glass" serve "${model[@]}" --threads 1 --role prefill >"$work/out" 2>"$work/err" &
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
grep -q 'disaggregated: decode rank 0, prefill rank 1' "$work/err" || { echo "no startup line naming the roles"; exit 1; }
grep -q '\[rank 1, prefill\] 1 prompts' "$work/err" || { echo "rank 1 did not report its one prompt"; exit 1; }
grep -q '\[rank 0, decode\] 1 prompts prefilled by rank 1' "$work/err" || { echo "rank 0 did not report"; exit 1; }
echo "served text == glass generate's; both ranks reported and ended"

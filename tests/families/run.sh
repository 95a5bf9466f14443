#!/usr/bin/env bash
# ctest llama_cpp_families: glass against llama.cpp on every family and type glass reads from GGUF.
#   run.sh CHECKER BLOCKS GLASS SOURCE_DIR SHARED_DIR WORK_DIR
# 1. scripts/make-family-models writes the random-weight Llama 2, Llama 3.1, Mistral, Qwen2, Qwen3,
#    Gemma 2 and Gemma 3 models, each in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the
#    k-quant mixes Q4_K_M, Q5_K_M, Q6_K (into WORK_DIR/models); check_dequantize.py compares
#    BLOCKS (tests/families/ggml_blocks.cpp) with llama.cpp's gguf-py on every quantized block.
# 2. llama.cpp (node-llama-cpp's prebuilt CPU build, the version pinned in bench/llama_cpp, installed
#    into WORK_DIR/llama from npm's cache or the registry) runs each file: 8 greedy steps after the
#    family's prompt, and the logits of every step (bench/llama_cpp/families.mjs).
# 3. A chat prompt (tests/families/chat_conversation.json through each family's chat template,
#    or a real one from ../shared/templates) tokenized with special tokens parsed: glass
#    (GLASS chat-template --ids) and llama.cpp (bench/llama_cpp/tokenize.mjs) give the same ids, on
#    every family file and on Phi-3's real vocabulary (its special tokens swallow the newline after them).
# 4. CHECKER (tests/families/check_families.cpp) runs glass on the same files along llama.cpp's path
#    and compares: every greedy id, and the logits' NMSE per type.
# Exit 77 (ctest: skipped, never passed) when node >= 20, npm or the package cannot be had.
set -u
checker=$1
blocks=$2
glass=$3
src=$4
shared=$5
work=$6
. "$src/tests/npm_package.sh"  # skip, require_node, install_pinned

require_node
mkdir -p "$work/out" || exit 1
install_pinned "$src/bench/llama_cpp/package.json" "$work/llama" node-llama-cpp 600
cp "$src/bench/llama_cpp/families.mjs" "$src/bench/llama_cpp/tokenize.mjs" "$work/llama/" || exit 1

python3 "$src/scripts/make-family-models" "$work/models" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }

# Every quantized block read as llama.cpp reads it, bit for bit: its gguf-py (from the llama.cpp
# source the package bundles) against glass's ggml_quants.hpp (the BLOCKS tool).
bundle="$work/llama/node_modules/node-llama-cpp/llama/gitRelease.bundle"
if [ ! -d "$work/llama.cpp/gguf-py" ]; then
  rm -rf "$work/llama.cpp"
  { git clone -q --no-checkout "$bundle" "$work/llama.cpp" && git -C "$work/llama.cpp" checkout -q HEAD -- gguf-py; } \
    >"$work/clone.log" 2>&1 || { cat "$work/clone.log"; echo "cannot read llama.cpp's source from $bundle"; exit 1; }
fi
python3 "$src/tests/families/check_dequantize.py" "$work/llama.cpp/gguf-py" "$blocks" "$work/models" || exit 1

# One node process for all 77 files (node and llama.cpp start once: ~1.2 s each saved).
rm -f "$work"/out/*.json  # no result of an earlier run is read as this one's
list="$work/out/files.json"
{
  echo "["
  sep=""
  for family in llama2 llama3 mistral qwen2 qwen3 gemma2 gemma3; do
    for type in F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K_M Q5_K_M Q6_K; do
      # The prompt is the family's reference prompt (ids, no BOS added by the tool).
      printf '%s{"model": "%s", "prompt": "%s", "out": "%s"}\n' "$sep" "$work/models/$family-$type.gguf" \
          "$work/models/$family-reference.json" "$work/out/$family-$type.json"
      sep=","
    done
  done
  echo "]"
} >"$list"
if ! timeout 600 node "$work/llama/families.mjs" --each "$list" 8 --logits 2>"$work/out/llama.err"; then
  echo "llama.cpp failed:"; cat "$work/out/llama.err"
  grep -l '"loaded":false' "$work"/out/*.json 2>/dev/null | while read -r f; do echo "$f:"; head -c 2000 "$f"; echo; done
  exit 1
fi
# Chat prompts: the family's own template, else a real one (Llama 3.1's, Mistral Nemo's), and
# Phi-3's vocabulary with Phi-3.5's template.
chat_case() {  # NAME MODEL [TEMPLATE]
  local name=$1 model=$2
  local template=()
  [ $# -ge 3 ] && template=(--template "$3")
  "$glass" chat-template -m "$model" "${template[@]}" --messages "$src/tests/families/chat_conversation.json" \
      >"$work/out/chat-$name.txt" 2>"$work/out/chat-$name.err" &&
    "$glass" chat-template --ids -m "$model" "${template[@]}" --messages "$src/tests/families/chat_conversation.json" \
      >"$work/out/chat-$name.glass.json" 2>>"$work/out/chat-$name.err" || { echo "glass chat-template failed on $name:"; cat "$work/out/chat-$name.err"; exit 1; }
  timeout 120 node "$work/llama/tokenize.mjs" "$model" "$work/out/chat-$name.txt" >"$work/out/chat-$name.llama.json" \
      2>>"$work/out/chat-$name.err" || { echo "llama.cpp could not tokenize $name:"; cat "$work/out/chat-$name.err"; exit 1; }
  if ! cmp -s <(tr -d ' \n' <"$work/out/chat-$name.glass.json") <(tr -d ' \n' <"$work/out/chat-$name.llama.json"); then
    echo "chat prompt $name: glass and llama.cpp tokenize it differently"
    echo "  glass:     $(cat "$work/out/chat-$name.glass.json")"; echo "  llama.cpp: $(cat "$work/out/chat-$name.llama.json")"
    exit 1
  fi
  echo "chat prompt $name: $(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' "$work/out/chat-$name.glass.json") ids, the same as llama.cpp's"
}
for family in qwen2 qwen3 gemma2 gemma3; do chat_case "$family" "$work/models/$family-F32.gguf"; done
chat_case llama3 "$work/models/llama3-F32.gguf" "$shared/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"
chat_case mistral "$work/models/mistral-F32.gguf" "$shared/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja"
chat_case phi3 "$shared/tokenizers/llamacpp/ggml-vocab-phi-3.gguf" "$shared/templates/microsoft-Phi-3.5-mini-instruct.jinja"

exec "$checker" "$work/models" "$work/out"

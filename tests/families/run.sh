#!/usr/bin/env bash
# ctest llama_cpp_families: glass against llama.cpp on every family and type glass reads from GGUF.
#   run.sh CHECKER BLOCKS SOURCE_DIR WORK_DIR
# 1. scripts/make-family-models writes the random-weight Llama 2, Llama 3.1, Mistral, Qwen2, Qwen3,
#    Gemma 2 and Gemma 3 models, each in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the
#    k-quant mixes Q4_K_M, Q5_K_M, Q6_K (into WORK_DIR/models); check_dequantize.py compares
#    BLOCKS (tests/families/ggml_blocks.cpp) with llama.cpp's gguf-py on every quantized block.
# 2. llama.cpp (node-llama-cpp's prebuilt CPU build, the version pinned in bench/llama_cpp, installed
#    into WORK_DIR/llama from npm's cache or the registry) runs each file: 8 greedy steps after the
#    family's prompt, and the logits of every step (bench/llama_cpp/families.mjs).
# 3. CHECKER (tests/families/check_families.cpp) runs glass on the same files along llama.cpp's path
#    and compares: every greedy id, and the logits' NMSE per type.
# Exit 77 (ctest: skipped, never passed) when node >= 20, npm or the package cannot be had.
set -u
checker=$1
blocks=$2
src=$3
work=$4
. "$src/tests/npm_package.sh"  # skip, require_node, install_pinned

require_node
mkdir -p "$work/out" || exit 1
install_pinned "$src/bench/llama_cpp/package.json" "$work/llama" node-llama-cpp 600
cp "$src/bench/llama_cpp/families.mjs" "$work/llama/families.mjs" || exit 1

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

for family in llama2 llama3 mistral qwen2 qwen3 gemma2 gemma3; do
  for type in F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K_M Q5_K_M Q6_K; do
    # The prompt is the family's reference prompt (ids, no BOS added by the tool).
    if ! timeout 120 node "$work/llama/families.mjs" "$work/models/$family-$type.gguf" \
        "$work/models/$family-reference.json" 8 --logits >"$work/out/$family-$type.json" 2>"$work/out/$family-$type.err"; then
      echo "llama.cpp failed on $family-$type.gguf:"; cat "$work/out/$family-$type.json" "$work/out/$family-$type.err"
      exit 1
    fi
  done
done
exec "$checker" "$work/models" "$work/out"

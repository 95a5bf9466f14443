#!/usr/bin/env bash
# The ctest tests `install_consumer` and `subdirectory_consumer`: glass used as a library by a
# project of its own. story.cpp generates the shipped model's story and checks it token for token
# against llama2.c's golden, so each way of using glass is proved by a program that runs.
#
# Usage: check_install.sh MODE SOURCE_DIR BUILD_DIR WORK_DIR GOLDEN CMAKE CXX GENERATOR PKG_CONFIG
#   install           `cmake --install BUILD_DIR --prefix WORK_DIR/prefix`; check what landed there
#                     (and that nothing installed points back into SOURCE_DIR); then build story.cpp
#                     against it through find_package(glass) (find_package/CMakeLists.txt) and
#                     through pkg-config (glass.pc), and run both.
#   add_subdirectory  build story.cpp in a project that adds SOURCE_DIR with add_subdirectory
#                     (add_subdirectory/CMakeLists.txt), and run it.
# Each way configures and compiles one file (~20-40 s on 2 cores). Logs stay in WORK_DIR.
set -euo pipefail
[ $# -eq 9 ] || { echo "usage: $0 install|add_subdirectory SOURCE_DIR BUILD_DIR WORK_DIR GOLDEN CMAKE CXX GENERATOR PKG_CONFIG"; exit 2; }
mode=$1 src=$2 build=$3 work=$4 golden=$5 cmake=$6 cxx=$7 generator=$8 pkg_config=$9
here=$src/tests/install

fail() { echo "$mode: $*"; exit 1; }
# Runs a command with its output in WORK_DIR/NAME.log, shown only when it fails.
step() {
  local name=$1; shift
  if ! "$@" > "$work/$name.log" 2>&1; then
    cat "$work/$name.log"
    fail "$name failed: $*"
  fi
}
# Runs a built story; it must tell llama2.c's story, reading the model from the expected directory.
run_story() {
  local exe=$1 models=$2 out
  out=$("$exe" "$golden") || { echo "$out"; fail "$exe failed"; }
  echo "$out"
  local printed
  printed=$(sed -n 's/^models: //p' <<< "$out")
  [ "$(realpath -m "$printed")" = "$(realpath -m "$models")" ] ||
    fail "$exe reads the model from $printed, expected $models"
}

[ -f "$golden" ] || fail "missing ground-truth file $golden"
rm -rf "$work"
mkdir -p "$work"

case $mode in
install)
  prefix=$work/prefix
  step install "$cmake" --install "$build" --prefix "$prefix"
  for f in include/glass/glass.hpp include/glass/tokenize/bpe_merge.hpp include/glass/formats/gguf.hpp \
           include/glass/fast/fast_session.hpp share/glass/models/stories260K.bin \
           share/glass/models/tok512.bin share/glass/models/LICENSE share/glass/models/README.md \
           share/glass/data/harbour.txt share/cmake/glass/glassConfig.cmake \
           share/cmake/glass/glassConfigVersion.cmake share/cmake/glass/glassTargets.cmake \
           share/pkgconfig/glass.pc; do
    [ -f "$prefix/$f" ] || fail "cmake --install did not install $f"
  done
  # Every header of the source tree is installed.
  (cd "$src/include" && find glass -name '*.hpp') | while IFS= read -r h; do
    [ -f "$prefix/include/$h" ] || fail "cmake --install did not install include/$h"
  done
  # An installed package must not send its users back to the source tree (include directories or
  # GLASS_MODELS_DIR left as build-tree paths).
  if grep -rl -- "$src" "$prefix/share/cmake" "$prefix/share/pkgconfig"; then
    fail "the installed package files above refer to the source tree $src"
  fi

  # 1. find_package(glass), with nothing but the prefix to find it by.
  step configure "$cmake" -S "$here/find_package" -B "$work/find_package" -G "$generator" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  grep -q "glass found in $prefix/share/cmake/glass" "$work/configure.log" ||
    { cat "$work/configure.log"; fail "find_package(glass) did not find the installed package"; }
  step build "$cmake" --build "$work/find_package"
  run_story "$work/find_package/story" "$prefix/share/glass/models"

  # 2. pkg-config. The string macros' quotes are escaped for a shell (glass.pc), hence eval.
  flags=$(PKG_CONFIG_PATH="$prefix/share/pkgconfig" "$pkg_config" --cflags --libs glass) ||
    fail "pkg-config does not know glass"
  step pkg_config_build eval "\"\$cxx\" -std=c++20 -O2 \"\$here/story.cpp\" -o \"\$work/story_pkg_config\" $flags"
  run_story "$work/story_pkg_config" "$prefix/share/glass/models"
  ;;
add_subdirectory)
  step configure "$cmake" -S "$here/add_subdirectory" -B "$work/add_subdirectory" -G "$generator" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DGLASS_SOURCE_DIR="$src"
  # A subdirectory glass builds neither CUDA path by default (so needs no nvcc and no Boost).
  grep -q "glass: CUDA path off" "$work/configure.log" && grep -q "glass: CUDA emulator off" "$work/configure.log" ||
    { cat "$work/configure.log"; fail "glass as a subdirectory did not default to GLASS_CUDA=OFF, GLASS_CUDA_EMULATOR=OFF"; }
  step build "$cmake" --build "$work/add_subdirectory"
  # Only the consumer was built, not glass's own programs (they would land in bin/).
  built=$(find "$work/add_subdirectory/bin" -type f 2>/dev/null | head -n 3)
  [ -z "$built" ] || fail "building the consumer built glass's programs too: $built"
  run_story "$work/add_subdirectory/story" "$src/models"
  ;;
*) fail "unknown mode (install or add_subdirectory)" ;;
esac
echo "$mode: ok"

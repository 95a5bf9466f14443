#!/usr/bin/env bash
# ctest neon_qemu: the NEON kernel set (include/glass/fast/kernels_neon*.hpp) built for AArch64 and
# run under user-mode emulation, on this x86-64 machine.
#   run.sh [OUT_DIR [SHARED_DIR]]     (defaults: build-neon/ and ../shared beside the checkout)
#
# 1. Finds Debian's cross compiler (g++-aarch64-linux-gnu) and qemu-aarch64 (qemu-user),
#    installing them with apt-get when missing (as root; `apt-get update` only if the first
#    install fails).
# 2. Proves qemu runs a static AArch64 program here at all.
# 3. Cross-compiles tests/neon/test_neon.cpp -O2 (linked -static: no AArch64 libraries are needed
#    at run time) against the host's header-only Eigen, doctest and nlohmann-json, into OUT_DIR
#    (kept: rebuilt only when a header or test source is newer), and runs it under qemu-aarch64
#    with its default CPU ("max": NEON + the dotprod extension), then the kernel cases again with
#    -cpu cortex-a53 (ARMv8.0: no sdot, so matvec_int8 takes its fallback).
# The program includes only what the fast path needs (no tokenizer regexes: PCRE2 and utf8proc
# are libraries, and there are none for AArch64 here); the goldens give the token ids.
#
# Exit: 0 passed; 1 failed; 77 skipped (the tools cannot be installed, or qemu cannot run here),
# which ctest reports as "Skipped" (SKIP_RETURN_CODE 77), never as passed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build-neon}
shared=${2:-$root/../shared}
skip() { echo "SKIPPED: $*"; exit 77; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)

# 1. The tools.
cxx=aarch64-linux-gnu-g++
have_tools() { command -v "$cxx" >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1; }
if ! have_tools; then
  echo "installing g++-aarch64-linux-gnu and qemu-user (missing: $(command -v "$cxx" >/dev/null || echo "$cxx ")$(command -v qemu-aarch64 >/dev/null || echo qemu-aarch64))"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo_cmd=(sudo -n); else
      skip "the cross compiler or qemu-aarch64 is missing and this user cannot run apt-get"
    fi
  fi
  command -v apt-get >/dev/null 2>&1 || skip "no apt-get to install g++-aarch64-linux-gnu and qemu-user"
  apt_log="$out/apt.log"
  # Another apt-get may hold the lock (a parallel install): wait for it rather than fail.
  apt=(env DEBIAN_FRONTEND=noninteractive timeout 900 "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600)
  install=("${apt[@]}" install -y -qq --no-install-recommends g++-aarch64-linux-gnu qemu-user)
  if ! "${install[@]}" >"$apt_log" 2>&1; then
    echo "first install failed; apt-get update, then again"
    if ! { "${apt[@]}" update -qq && "${install[@]}"; } >>"$apt_log" 2>&1; then
      tail -n 3 "$apt_log"
      skip "apt-get could not install g++-aarch64-linux-gnu and qemu-user (log: $apt_log)"
    fi
  fi
  have_tools || skip "apt-get succeeded but $cxx or qemu-aarch64 is not on PATH"
fi
echo "$($cxx --version | head -n 1); $(qemu-aarch64 --version | head -n 1)"

# 2. Can qemu run an AArch64 program here? If not, the environment (not the kernels) is the problem.
printf 'int main() { return 42; }\n' >"$out/probe.c"
"$cxx" -x c -O1 -static -o "$out/probe" "$out/probe.c" || skip "$cxx cannot build a static AArch64 program"
qemu-aarch64 "$out/probe"
[ $? -eq 42 ] || skip "qemu-aarch64 cannot run a static AArch64 program here"

# 3. The test program. Header-only dependencies come from the host through one folder of links
#    (-isystem), so the cross compiler's own C library headers are the only ones it sees.
mkdir -p "$out/include" || exit 1
for dep in /usr/include/eigen3/Eigen /usr/include/doctest /usr/include/nlohmann; do
  [ -d "$dep" ] || { echo "FAILED: $dep is missing (the host build needs it too)"; exit 1; }
  ln -sfn "$dep" "$out/include/$(basename "$dep")"
done
flags=(-std=c++20 -O2 -pthread -Wall -Wextra -I"$root/include" -isystem "$out/include")
binary="$out/test_neon"
# doctest's main (tests/doctest_main.cpp) is built once and kept; it compiles beside the test.
if [ ! -s "$out/doctest_main.o" ]; then
  "$cxx" "${flags[@]}" -c -o "$out/doctest_main.o.tmp" "$root/tests/doctest_main.cpp" &&
    mv "$out/doctest_main.o.tmp" "$out/doctest_main.o" &
fi
# The test: rebuilt when any header or test source (tests/kernel_checks.hpp too) is newer than it
# (cross-compiling takes ~1 min).
if [ ! -x "$binary" ] || [ -n "$(find "$root/include/glass" "$here" "$root/tests/kernel_checks.hpp" -newer "$binary" \
                               -name '*.[hc]pp' | head -n 1)" ]; then
  echo "cross-compiling $binary"
  start=$SECONDS
  "$cxx" "${flags[@]}" -DGLASS_MODELS_DIR="\"$root/models\"" \
    -DGLASS_SHARED_DIR="\"$shared\"" -c -o "$out/test_neon.o" "$here/test_neon.cpp"
  rc=$?
  wait
  if [ $rc -ne 0 ] || [ ! -s "$out/doctest_main.o" ] ||
     ! "$cxx" -static -pthread -o "$binary.tmp" "$out/test_neon.o" "$out/doctest_main.o"; then
    echo "FAILED: the AArch64 build of tests/neon/test_neon.cpp"
    exit 1
  fi
  mv "$binary.tmp" "$binary"
  echo "built in $((SECONDS - start)) s"
fi
wait

start=$SECONDS
echo "== qemu-aarch64 (cpu max: NEON + dotprod), every test"
GLASS_NEON_EXPECT_INT8_DOT=neon-dot qemu-aarch64 "$binary" --no-intro=true
rc=$?
echo "== qemu-aarch64 -cpu cortex-a53 (ARMv8.0, no dotprod), the kernels"
GLASS_NEON_EXPECT_INT8_DOT=portable qemu-aarch64 -cpu cortex-a53 "$binary" --no-intro=true --test-case='kernels*'
rc_a53=$?
echo "ran in $((SECONDS - start)) s"
[ $rc -eq 0 ] && [ $rc_a53 -eq 0 ] || { echo "FAILED"; exit 1; }
echo "PASSED"

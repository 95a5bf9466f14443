#!/usr/bin/env bash
# Builds the Doxygen site, and with --check also proves it is clean (the ctest test `docs`).
#
# Usage: docs/build-docs.sh [--check] SOURCE_DIR OUTPUT_DIR
#   The site goes to OUTPUT_DIR/html/index.html. Exit 0: built with no warning. Exit 1: a
#   warning or a failed check (printed). Exit 77 (--check only): doxygen or graphviz is not
#   installed, so nothing was checked: ctest reports the test as skipped, never as passed.
set -euo pipefail
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
src=$(cd "$1" && pwd)
out=$2

# 1. Every public header opens with a Doxygen \file block (no tools needed for this one).
missing=0
while IFS= read -r header; do
  if ! head -n 3 "$header" | grep -q '^/// \\file'; then
    echo "${header#"$src"/}: the opening comment is not a Doxygen '/// \\file' block (see docs/Doxyfile)"
    missing=1
  fi
done < <(find "$src/include/glass" -name '*.hpp' | sort)
[ "$missing" -eq 0 ] || exit 1

for tool in doxygen dot perl; do
  if ! command -v "$tool" >/dev/null; then
    echo "$tool is not installed (scripts/install-deps installs doxygen and graphviz): docs not built"
    if [ "$check" -eq 1 ]; then exit 77; fi
    exit 1
  fi
done

rm -rf "$out"
mkdir -p "$out/generated"
# 2. One \example entry per numbered example, described by the first line of its opening comment.
{
  echo "/**"
  echo "\\page examples_list Examples"
  echo "Each numbered example is one step of the journey; read it with its walkthrough."
  echo "*/"
  for f in "$src"/examples/[0-9][0-9]_*.cpp; do
    name=$(basename "$f")
    what=$(head -n 1 "$f" | sed -e 's|^// *||' -e 's|->|→|g' -e 's|[\\@<>&]||g')
    printf '/** \\example %s\n %s\n */\n' "$name" "$what"
  done
} > "$out/generated/examples.dox"

# 3. Doxygen, warnings as errors.
if ! GLASS_SOURCE_DIR="$src" GLASS_DOCS_OUT="$out" doxygen "$src/docs/Doxyfile" 2> "$out/warnings.txt"; then
  cat "$out/warnings.txt"
  echo "doxygen failed (warnings are errors: docs/Doxyfile)"
  exit 1
fi
if [ -s "$out/warnings.txt" ]; then
  cat "$out/warnings.txt"
  exit 1
fi
echo "docs: $out/html/index.html"
[ "$check" -eq 1 ] || exit 0

# 4. The site has what it promises: the main page with its stage table, a page per walkthrough,
#    the figures page, the rendered data-flow diagrams, one page per example and per header.
fail() { echo "docs check: $*"; exit 1; }
html=$out/html
grep -q "CUDA twin" "$html/index.html" || fail "index.html lacks the stage table"
for md in "$src"/walkthroughs/[0-9][0-9]-*.md; do
  title=$(head -n 1 "$md" | sed -e 's/^# *//' -e 's/ .*//')
  grep -lq "$title" "$html"/md_walkthroughs_*.html 2>/dev/null || fail "no page for ${md#"$src"/}"
done
grep -lq "C20" "$html"/md_docs_pages_figures.html || fail "no figures page"
[ "$(grep -c '<svg\|\.svg' "$html/dataflow.html")" -ge 3 ] || fail "dataflow.html has no rendered diagrams"
for f in "$src"/examples/[0-9][0-9]_*.cpp; do
  name=$(basename "$f" .cpp)
  [ -f "$html/${name}_8cpp-example.html" ] || fail "no example page for $name"
done
while IFS= read -r header; do
  page=$(basename "$header" | sed -e 's/_/__/g' -e 's/\./_8/g')
  [ -f "$html/${page}_source.html" ] || fail "no source page for ${header#"$src"/} ($page)"
done < <(find "$src/include/glass" -name '*.hpp' | sort)
echo "docs check: clean"

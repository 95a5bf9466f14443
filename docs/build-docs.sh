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

# The files of the site: every public header, the CUDA twin (cuda/) and the CPU emulator's own
# sources (docs/Doxyfile: emulator/ without its stand-ins for NVIDIA's headers and cuBLAS, and
# without its tests).
list_sources() {
  find "$src/include/glass" -name '*.hpp'
  find "$src/cuda" -maxdepth 1 \( -name '*.cu' -o -name '*.cuh' -o -name '*.hpp' -o -name '*.cpp' \)
  find "$src/emulator" -maxdepth 1 \( -name '*.hpp' -o -name '*.cpp' \) ! -name cublas.cpp
}
# Doxygen's page name for a file: its base name, "_" -> "__", "." -> "_8" (as docs/md_filter.pl).
page_name() { basename "$1" | sed -e 's/_/__/g' -e 's/\./_8/g'; }

# 1. Every file of the site opens with a Doxygen \file block (no tools needed for this one).
missing=0
while IFS= read -r file; do
  if ! head -n 3 "$file" | grep -q '^/// \\file'; then
    echo "${file#"$src"/}: the opening comment is not a Doxygen '/// \\file' block (see docs/Doxyfile)"
    missing=1
  fi
done < <(list_sources | sort)
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
#    the figures page, the rendered data-flow diagrams, one page per example, and a page and an
#    annotated source per header and per cuda/ file.
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
# Every file of the site has its page and its annotated source (the cuda/ ones included, which
# walkthrough 14 and the stage table link to).
while IFS= read -r file; do
  page=$(page_name "$file")
  [ -f "$html/${page}.html" ] || fail "no page for ${file#"$src"/} ($page.html)"
  [ -f "$html/${page}_source.html" ] || fail "no source page for ${file#"$src"/} ($page)"
done < <(list_sources | sort)
# The stage table's CUDA column links to the cuda/ pages.
for page in attention_8cu rmsnorm_8cu transformer_8cpp glass__cuda_8hpp emulator_8hpp; do
  grep -q "href=\"$page.html\"" "$html/index.html" || fail "index.html does not link to $page.html"
done
# ... and walkthrough 14's links to kernel lines land on the annotated sources (docs/md_filter.pl).
grep -q 'href="rmsnorm_8cu_source.html#l[0-9]*"' "$html"/md_walkthroughs_14_*.html ||
  fail "walkthrough 14 does not link to the lines of cuda/rmsnorm.cu"
# A file page opens with its description, above the includes and the include graph
# (docs/DoxygenLayout.xml).
first=$(grep -n -m1 -e 'Detailed Description' -e '#include' -e 'Include dependency graph' "$html/attention_8hpp.html")
case "$first" in
  *"Detailed Description"*) ;;
  *) fail "attention.hpp's page shows its includes before its description (docs/DoxygenLayout.xml)" ;;
esac
# 5. What a reader sees (docs/check_pages.pl): no page shows a literal "///" or "//!" (a \verbatim
#    block inside "///" lines does that: use a ```text fence), no brief is cut mid-phrase, and every
#    link between pages, and every #l00042 line anchor, lands on something that exists.
perl "$src/docs/check_pages.pl" "$html" || fail "see above"
echo "docs check: clean"

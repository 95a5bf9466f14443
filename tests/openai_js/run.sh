#!/usr/bin/env bash
# ctest serve_openai_js: glass serve under the official `openai` npm package.
#   run.sh GLASS_BIN WORK_DIR
# Installs the exact openai version pinned in package.json (beside this script) into WORK_DIR (in
# the build tree; npm's cache is used when it has the package), then runs check.mjs there, which
# starts the servers it needs on loopback. Exit 77 (ctest: skipped, never passed) when node or npm
# is missing, node is older than 20, or the package cannot be installed.
set -u
glass=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }

command -v node >/dev/null 2>&1 || skip "no node on PATH"
command -v npm >/dev/null 2>&1 || skip "no npm on PATH"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
  skip "node $(node --version) is older than 20 (the SDK wants fetch and web streams)"

mkdir -p "$work" || exit 1
cp "$here/package.json" "$work/package.json" || exit 1
want=$(node -p "require('$here/package.json').dependencies.openai")
have=$(node -p "try { require('$work/node_modules/openai/package.json').version } catch { '' }")
if [ "$have" != "$want" ]; then
  echo "installing openai@$want into $work"
  if ! timeout 300 npm install --prefix "$work" --no-audit --no-fund --no-package-lock --prefer-offline \
      >"$work/npm.log" 2>&1; then
    tail -n 20 "$work/npm.log"
    skip "npm install openai@$want failed (no registry and nothing in npm's cache?)"
  fi
  have=$(node -p "require('$work/node_modules/openai/package.json').version")
  [ "$have" = "$want" ] || skip "npm installed openai $have, not the pinned $want"
fi
echo "openai@$have, node $(node --version)"

# Run from the work folder, so that `import 'openai'` finds its node_modules.
cp "$here/check.mjs" "$work/check.mjs" || exit 1
exec timeout 300 node "$work/check.mjs" "$glass" "$work"

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
. "$here/../npm_package.sh"  # skip, require_node, install_pinned

require_node
install_pinned "$here/package.json" "$work" openai 300

# Run from the work folder, so that `import 'openai'` finds its node_modules.
cp "$here/check.mjs" "$work/check.mjs" || exit 1
exec timeout 300 node "$work/check.mjs" "$glass" "$work"

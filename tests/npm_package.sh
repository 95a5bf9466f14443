# tests/npm_package.sh — sourced by the test scripts that drive an npm package (openai_js/run.sh,
# families/run.sh): node >= 20 and npm on PATH, then the exact version a package.json pins,
# installed into a folder of the build tree (npm's cache first, then the registry). Whatever is
# missing skips the test: exit 77, which ctest reports as skipped, never as passed.
#   require_node
#   install_pinned PACKAGE_JSON DIR NAME SECONDS   -> DIR/node_modules/NAME at the pinned version

skip() { echo "SKIPPED: $*"; exit 77; }

require_node() {
  command -v node >/dev/null 2>&1 || skip "no node on PATH"
  command -v npm >/dev/null 2>&1 || skip "no npm on PATH"
  node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
    skip "node $(node --version) is older than 20"
}

install_pinned() {
  local json=$1 dir=$2 name=$3 limit=$4 want have
  mkdir -p "$dir" || exit 1
  cp "$json" "$dir/package.json" || exit 1
  want=$(node -p "require('$json').dependencies['$name']")
  have=$(node -p "try { require('$dir/node_modules/$name/package.json').version } catch { '' }")
  if [ "$have" != "$want" ]; then
    echo "installing $name@$want into $dir"
    if ! timeout "$limit" npm install --prefix "$dir" --no-audit --no-fund --no-package-lock --prefer-offline \
        >"$dir/npm.log" 2>&1; then
      tail -n 20 "$dir/npm.log"
      skip "npm install $name@$want failed (no registry and nothing in npm's cache?)"
    fi
    have=$(node -p "require('$dir/node_modules/$name/package.json').version")
    [ "$have" = "$want" ] || skip "npm installed $name $have, not the pinned $want"
  fi
  echo "$name@$have, node $(node --version)"
}

#!/usr/bin/env bash
# Installs what the web inbox's browser tests inject into pages (axe-core,
# pinned by package-lock.json) with `npm ci`, into
#
#   ${GATEHOUSE_TOOLS_DIR:-${CARGO_TARGET_DIR:-target}/tools}/web/node_modules
#
# where tests/tests/e2e/surfaces/web_browser.rs finds axe.min.js. Idempotent: it is
# reinstalled only when the pinned list changed. Reaches only npm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$root/$target ;; esac
dest=${GATEHOUSE_TOOLS_DIR:-$target/tools}
case $dest in /*) ;; *) dest=$root/$dest ;; esac
want=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$dest/web/.stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing the browser tests' scripts into $dest/web"
    rm -rf "$dest/web"
    mkdir -p "$dest/web"
    cp "$here/package.json" "$here/package-lock.json" "$dest/web/"
    (cd "$dest/web" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$dest/web/.stamp"
fi
test -s "$dest/web/node_modules/axe-core/axe.min.js"
echo "axe-core $(node -p "require('$dest/web/node_modules/axe-core/package.json').version")"

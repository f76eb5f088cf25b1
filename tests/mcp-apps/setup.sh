#!/usr/bin/env bash
# Installs the MCP App host the faces browser test runs (the official
# ext-apps SDK and MCP client, and esbuild; pinned by package-lock.json)
# with `npm ci`, into
#
#   ${GATEHOUSE_TOOLS_DIR:-${CARGO_TARGET_DIR:-target}/tools}/mcp-apps
#
# and bundles host.js there as host.bundle.js, where
# tests/tests/e2e/f_faces/faces_mcp_app.rs finds it. Idempotent: npm runs only when
# the pinned list changed; the bundle is rebuilt every time (it takes well
# under a second). Reaches only npm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$root/$target ;; esac
dest=${GATEHOUSE_TOOLS_DIR:-$target/tools}
case $dest in /*) ;; *) dest=$root/$dest ;; esac
want=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$dest/mcp-apps/.stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing the MCP App host's packages into $dest/mcp-apps"
    rm -rf "$dest/mcp-apps"
    mkdir -p "$dest/mcp-apps"
    cp "$here/package.json" "$here/package-lock.json" "$dest/mcp-apps/"
    (cd "$dest/mcp-apps" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$dest/mcp-apps/.stamp"
fi
# Resolved from the installed node_modules (esbuild looks up from the
# entry's directory first, so point it there explicitly).
NODE_PATH="$dest/mcp-apps/node_modules" "$dest/mcp-apps/node_modules/.bin/esbuild" "$here/host.js" \
    --bundle --platform=browser --format=iife --target=chrome120 \
    --log-level=warning --outfile="$dest/mcp-apps/host.bundle.js"
test -s "$dest/mcp-apps/host.bundle.js"
v() { node -p "require('$dest/mcp-apps/node_modules/$1/package.json').version"; }
echo "ext-apps $(v @modelcontextprotocol/ext-apps), MCP client $(v @modelcontextprotocol/client), esbuild $(v esbuild)"

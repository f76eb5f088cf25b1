#!/usr/bin/env bash
# Installs the pinned OpenID Connect provider the end-to-end tests start on
# loopback (tests/src/oidc.rs runs tests/oidc/provider.mjs with node) into
# a project-local directory, the way tools/langs/setup.sh installs the
# language toolchains:
#
#   ${GATEHOUSE_TOOLS_DIR:-${CARGO_TARGET_DIR:-target}/tools}/oidc/node_modules
#
# Idempotent: reinstalled only when package.json or package-lock.json
# changed. Needs node and npm; reaches only npm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$root/$target ;; esac
dest=${GATEHOUSE_TOOLS_DIR:-$target/tools}
case $dest in /*) ;; *) dest=$root/$dest ;; esac
dest=$dest/oidc
mkdir -p "$dest"

want=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$dest/.stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing the tests' OpenID Connect provider into $dest"
    rm -rf "$dest/node_modules"
    cp "$here/package.json" "$here/package-lock.json" "$dest/"
    (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$dest/.stamp"
fi
echo "oidc-provider $(node -p "require('$dest/node_modules/oidc-provider/package.json').version")"

#!/usr/bin/env bash
# Installs the pinned toolchains that build the Python and JavaScript
# gadgets (componentize-py from PyPI, componentize-js from npm), and the
# official MCP SDK the tests serve a real MCP server with, into a
# project-local directory, so tests and `gatehouse new` starters use exactly
# the versions this repository was verified with:
#
#   ${GATEHOUSE_TOOLS_DIR:-${CARGO_TARGET_DIR:-target}/tools}/py   a venv
#   ${GATEHOUSE_TOOLS_DIR:-${CARGO_TARGET_DIR:-target}/tools}/js   node_modules
#
# Idempotent: each part is reinstalled only when its pinned list changed.
# Needs python3 (with venv) and node/npm; reaches only PyPI and npm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$root/$target ;; esac
dest=${GATEHOUSE_TOOLS_DIR:-$target/tools}
case $dest in /*) ;; *) dest=$root/$dest ;; esac
mkdir -p "$dest"

stamp() { cat "$@" | sha256sum | cut -d' ' -f1; }

want=$(stamp "$here/requirements.txt" "$here/requirements-tests.txt")
if [ "$(cat "$dest/py/.stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing the Python toolchain into $dest/py"
    rm -rf "$dest/py"
    python3 -m venv "$dest/py"
    "$dest/py/bin/pip" install --quiet --disable-pip-version-check \
        -r "$here/requirements.txt" -r "$here/requirements-tests.txt"
    echo "$want" > "$dest/py/.stamp"
fi

want=$(stamp "$here/package.json" "$here/package-lock.json")
if [ "$(cat "$dest/js/.stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing the JavaScript toolchain into $dest/js"
    rm -rf "$dest/js"
    mkdir -p "$dest/js"
    cp "$here/package.json" "$here/package-lock.json" "$dest/js/"
    (cd "$dest/js" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$dest/js/.stamp"
fi

"$dest/py/bin/componentize-py" --version
echo "componentize-js $("$dest/js/node_modules/.bin/componentize-js" --version)"

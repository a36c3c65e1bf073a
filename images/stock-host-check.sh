#!/usr/bin/env bash
# Prove the README's first command on stock Debian. For each suite (default: bookworm trixie, i.e. Debian 12
# and 13): a minimal root filesystem with python3 and ca-certificates but no pip and no python3-venv, as
# Debian ships its Python, made with debootstrap and imported once as grpolab-stock:<suite> (kept, so re-runs
# skip it). In a fresh container of it, with this machine's Docker socket and the repository at the same path
# (Compose's relative volumes then resolve), run `bash images/setup-host.sh` twice (a first run and a re-run,
# both timed), then the README's activation, `invoke --list`, `docker compose version`, and `docker compose
# config` of every compose file. The container after the first command is kept as
# grpolab-stock:<suite>-set-up (tests/test_setup_host.py runs the docker-group cases in it). Timings go to
# bench/stock-host-<suite>.json.
#
# Ubuntu's archive is not reachable from our machines, so Ubuntu is not checked here: what differs there
# (docker-compose-v2, python3.11 on 22.04) is the table in hostlab/host/packages.py, which has its own test.
#
# Downloads are cached between runs (apt's .debs and pip's cache under ~/.cache/grpolab/stock-host/); apt and
# pip still do every install. Behind a TLS-re-signing proxy the host's CA bundle (SSL_CERT_FILE, else Debian's
# /etc/ssl/certs/ca-certificates.crt) is mounted read-only for pip.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
mirror=${GRPOLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
ca_bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/grpolab/stock-host
log() { echo "[stock-host-check] $*"; }

# grpolab-stock:<suite>, made once: debootstrap minbase + python3 + ca-certificates, then `docker import`.
stock_image() {
    local suite=$1 image=grpolab-stock:$1 root started
    if docker image inspect "$image" >/dev/null 2>&1; then
        return
    fi
    command -v debootstrap >/dev/null || PATH=$PATH:/usr/sbin:/sbin
    started=$(date +%s)
    root=$(mktemp -d "/tmp/grpolab-stock-$suite.XXXXXX")
    log "debootstrap $suite (python3, no pip, no python3-venv) into $root"
    debootstrap --variant=minbase --include=python3,ca-certificates "$suite" "$root" "$mirror" >/dev/null
    tar -C "$root" --numeric-owner -c . | docker import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
    rm -rf "$root"
    log "$image imported in $(($(date +%s) - started)) s"
}

# The commands a new user types, inside the stock container; prints the two timings for the caller.
# `invoke --list | sed -n 1,3p`: sed, not head, reads the whole list, so invoke never writes into a closed pipe
# (with pipefail, a list past Python's 8 KiB stdout buffer made head's early exit a BrokenPipeError, exit 120).
# shellcheck disable=SC2016  # expanded in the container, not here
in_container_script='
set -euo pipefail
cd "$REPO"
t0=$(date +%s.%N); bash images/setup-host.sh; t1=$(date +%s.%N)
bash images/setup-host.sh; t2=$(date +%s.%N)
. .venvs/host/bin/activate && invoke --list >/dev/null && invoke --list | sed -n 1,3p
docker compose version
for file in compose/*.yaml; do  # this Compose reads every compose file of ours
    # NAME-EXTRA.yaml adds to NAME.yaml services (vllm-server-nvidia.yaml: GPUs for vllm-server.yaml): read over it
    over=("${file%-*}.yaml"); [[ "$over" != "$file" && -f "$over" ]] || over=()
    LAB_IMAGE=check LAB_CA_BUNDLE=/run/host-ca.crt VIDEO_GID=44 RENDER_GID=993 \
        docker compose -f compose/base.yaml ${over[@]/#/-f } -f "$file" config --quiet
done
seconds() { python3 -c "print(round($2 - $1, 2))"; }
echo "timings: first_run_s=$(seconds "$t0" "$t1") rerun_s=$(seconds "$t1" "$t2")"
'

check_suite() {
    local suite=$1 name=grpolab-stock-check-$1 out status previous
    stock_image "$suite"
    mkdir -p "$cache/$suite/apt/partial" "$cache/$suite/pip" "$repo/bench"
    docker rm -f -v "$name" >/dev/null 2>&1 || true
    log "$suite: the README's first command in a fresh grpolab-stock:$suite container"
    # .venvs is an empty volume in there: the container's Python makes its own host venv, not this machine's.
    docker create --name "$name" \
        -v /var/run/docker.sock:/var/run/docker.sock \
        -v "$repo:$repo" -v "$repo/.venvs" \
        -v "$cache/$suite/apt:/var/cache/apt/archives" -v "$cache/$suite/pip:/root/.cache/pip" \
        -v "$ca_bundle:/run/host-ca.crt:ro" -e PIP_CERT=/run/host-ca.crt -e SSL_CERT_FILE=/run/host-ca.crt \
        -e REPO="$repo" -e DEBIAN_FRONTEND=noninteractive \
        "grpolab-stock:$suite" bash -c "$in_container_script" >/dev/null
    out=$(mktemp)
    status=0
    docker start -a "$name" 2>&1 | tee "$out" || status=$?
    [ "$status" -eq 0 ] && status=$(docker inspect -f '{{.State.ExitCode}}' "$name")
    if [ "$status" -eq 0 ]; then
        previous=$(docker image inspect -f '{{.Id}}' "grpolab-stock:$suite-set-up" 2>/dev/null || true)
        docker commit "$name" "grpolab-stock:$suite-set-up" >/dev/null
        # The commit moves the tag; the image an earlier check left (1.2-1.4 GB) would stay untagged on every
        # re-run. The builds' own rule removes it: once no name is left on it, unless a container still uses it.
        if [ -n "$previous" ]; then
            (cd "$repo" && python3 -c 'import sys; from hostlab.images.builders.handover import drop_untagged; drop_untagged(*sys.argv[1:])' \
                "$previous" "grpolab-stock:$suite-set-up")
        fi
    fi
    docker rm -f -v "$name" >/dev/null
    if [ "$status" -ne 0 ]; then
        log "FAIL: $suite: the README's first command exited $status (output above)"
        return 1
    fi
    record "$suite" "$out"
    rm -f "$out"
}

record() {
    local suite=$1 out=$2 first rerun compose
    first=$(sed -n 's/.*first_run_s=\([0-9.]*\).*/\1/p' "$out")
    rerun=$(sed -n 's/.*rerun_s=\([0-9.]*\).*/\1/p' "$out")
    compose=$(sed -n 's/^Docker Compose version //p' "$out" | tail -1)
    printf '{"suite": "%s", "first_run_s": %.1f, "rerun_s": %.2f, "compose": "%s"}\n' "$suite" "$first" "$rerun" "$compose" \
        | (cd "$repo" && python3 -m hostlab.bench.docs stock-host --case "$suite" --bench-dir "${GRPOLAB_BENCH_DIR:-$repo/bench}")
    log "PASS: $suite: first run ${first} s, re-run ${rerun} s, invoke --list ok, Compose $compose"
}

suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie)
for suite in "${suites[@]}"; do
    check_suite "$suite"
done

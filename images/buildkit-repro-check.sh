#!/usr/bin/env bash
# Which way of building gives byte-identical images (same image id = config digest, same layer diff ids) on a
# current Docker? Run as root on a Debian host with Docker (any version; it only lends the base image):
#
#     sudo bash images/buildkit-repro-check.sh           # 5.5-8.5 min on 2 cores; reuses the chroot
#     sudo bash images/buildkit-repro-check.sh --clean   # stop and delete the chroot and everything it stored
#
# It makes (once) a Debian 13 trixie chroot with docker.io 26.1.5 (BuildKit 0.13), docker-cli and docker-buildx
# 0.13.1 (mmdebstrap, Debian's archive only: no registry anywhere), and runs that dockerd in its own mount AND
# network namespace (a dockerd in the host's network namespace started with --bridge none deletes the host's
# docker0), with its own socket, data root, exec root and pidfile, all inside the chroot; the host's dockerd is
# never touched. The base (BASE_IMAGE, default grpolab-base:trixie-amd64) comes from the host's Docker by
# `docker save | docker load` (or BASE_TAR). A small Dockerfile shaped like images/Dockerfile (a builder stage
# bind-mounted into a later RUN, RUN --mount=type=cache and type=secret,id=ca_bundle, a venv and a pip install
# that write fresh mtimes and bytecode, ARG SOURCE_DATE_EPOCH in every stage, `ARG DEPS=deps` / `FROM ${DEPS} AS
# lab`, a COPY of a folder, a LABEL from a build arg) is built twice per way, with `docker builder prune -af` and
# the first image removed in between, and the two compared: one line per way, SAME/DIFFERENT/FAILED, both builds'
# image id, config digest, diff ids, history `created` values and files newer than the epoch per layer, and the
# exact command. Then: does a new SOURCE_DATE_EPOCH reuse cached layers, and does `FROM` an image built at epoch
# E1 keep that image's layers in a build at another epoch. Exit status 0 only when the way the project recommends
# (c2: containerd image store, `--output type=docker,name=T,rewrite-timestamp=true,dest=- | docker load`) gave the
# same ids twice. What it saw: RESULTS at the end of this file.
set -uo pipefail

ROOT=${TRIXIE_ROOT:-/var/tmp/trixie-docker}          # the chroot; dockerd's data root is $ROOT/var/lib/docker
BASE_IMAGE=${BASE_IMAGE:-grpolab-base:trixie-amd64}  # taken from the host's Docker (or BASE_TAR: a `docker save` tar)
MIRROR=${GRPOLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
E0=${EPOCH0:-1780185600}  # 2026-05-31
E1=${EPOCH1:-1780272000}  # 2026-06-01
E2=${EPOCH2:-1780358400}  # 2026-06-02
CTX=/root/repro           # inside the chroot
HOSTCTX=$ROOT$CTX
T0=$(date +%s)
log() { echo "[buildkit-repro-check] $*" >&2; }
results=()
recommended=FAILED

pid() { cat "$ROOT/run/docker.pid" 2>/dev/null; }
# A command line run in the chroot, in the trixie dockerd's mount namespace (its /proc, /sys, /dev), in $CTX.
D() { nsenter -t "$(pid)" -m chroot "$ROOT" /bin/bash -o pipefail -c "cd $CTX && $1"; }

stop_dockerd() {
    local p; p=$(pid) || return 0
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 0
    kill "$p"
    for _ in $(seq 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    rm -f "$ROOT/run/docker.pid"
}

if [ "${1:-}" = --clean ]; then
    stop_dockerd
    rm -rf --one-file-system "$ROOT"
    log "removed $ROOT"
    exit 0
fi
[ "$(id -u)" = 0 ] || { log "run as root (debootstrap, namespaces, a second dockerd)"; exit 2; }

setup_root() {
    if [ -x "$ROOT/usr/bin/docker" ] && [ -x "$ROOT/usr/libexec/docker/cli-plugins/docker-buildx" ]; then return; fi
    log "making $ROOT (trixie minbase + docker.io docker-cli docker-buildx containerd)"
    local s; s=$(date +%s)
    mmdebstrap --variant=minbase --include=docker.io,docker-cli,docker-buildx,containerd,runc,tini,iptables,ca-certificates \
        trixie "$ROOT" "$MIRROR" >&2 || { log "mmdebstrap failed"; exit 2; }
    log "chroot made in $(( $(date +%s) - s ))s"
}

# start_dockerd classic|containerd: the trixie dockerd with that image store, in its own mount and network
# namespaces (unshare; the network namespace keeps its docker0 and its iptables off the host's).
start_dockerd() {
    local store=$1
    stop_dockerd
    mkdir -p "$ROOT/etc/docker"
    if [ "$store" = containerd ]; then
        echo '{"features": {"containerd-snapshotter": true}}' > "$ROOT/etc/docker/daemon.json"
    else
        echo '{}' > "$ROOT/etc/docker/daemon.json"
    fi
    # exec all the way down: the pid in $ROOT/run/docker.pid is the unshare'd process, so killing it ends the
    # namespaces and their mounts with it.
    setsid unshare -m -n --propagation private /bin/sh -c "
        ip link set lo up 2>/dev/null
        mount --bind '$ROOT' '$ROOT'   # chroot's / a mount point: docker load's chrootarchive remounts it
        mount -t proc proc '$ROOT/proc'
        mount --rbind /sys '$ROOT/sys'
        mount --rbind /dev '$ROOT/dev'
        mount -t tmpfs tmpfs '$ROOT/tmp'
        exec chroot '$ROOT' dockerd --host unix:///run/docker.sock --data-root /var/lib/docker \
            --exec-root /run/docker --pidfile /run/docker.pid --iptables=false --ip6tables=false" \
        > "$ROOT/var/log/dockerd.log" 2>&1 < /dev/null &
    for _ in $(seq 120); do
        [ -S "$ROOT/run/docker.sock" ] && [ -n "$(pid)" ] && D 'docker info >/dev/null 2>&1' && break
        sleep 0.5
    done
    D 'docker info --format "{{.ServerVersion}} {{.Driver}}"' >/dev/null || { log "trixie dockerd did not start: $ROOT/var/log/dockerd.log"; tail -5 "$ROOT/var/log/dockerd.log" >&2; exit 2; }
    log "trixie dockerd up ($store store): $(D 'docker info --format "{{.ServerVersion}} {{.Driver}}"'), buildx $(D 'docker buildx version' | awk '{print $2}')"
    # Always (re)loaded from the one copy this run took: the host's tag may be rebuilt meanwhile.
    D "docker load -i $CTX/base.tar >/dev/null" || { log "could not load $BASE_IMAGE"; exit 2; }
}

# The base, once per run, from BASE_TAR or the host's Docker, into $HOSTCTX/base.tar (both stores load it).
take_base() {
    if [ -n "${BASE_TAR:-}" ]; then
        cp "$BASE_TAR" "$HOSTCTX/base.tar"
    else
        docker save "$BASE_IMAGE" -o "$HOSTCTX/base.tar"
    fi || { log "could not get $BASE_IMAGE from the host's Docker (or set BASE_TAR to a docker save tar)"; exit 2; }
    log "base $BASE_IMAGE: $(tar -xOf "$HOSTCTX/base.tar" manifest.json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Config"])')"
}

write_context() {
    rm -rf "$HOSTCTX"
    mkdir -p "$HOSTCTX/ctx/app" "$HOSTCTX/ctx/pkg" "$HOSTCTX/out"
    cat > "$HOSTCTX/ctx/Dockerfile" <<EOF
# Shaped like grpolab's images/Dockerfile (see images/buildkit-repro-check.sh).
ARG BASE_IMAGE=$BASE_IMAGE
ARG DEPS=deps

FROM \${BASE_IMAGE} AS source-builds
ARG SOURCE_DATE_EPOCH
SHELL ["/bin/sh", "-eu", "-c"]
RUN --mount=type=bind,source=pkg,target=/tmp/pkg \\
    --mount=type=secret,id=ca_bundle \\
    mkdir -p /wheels /sdist; \\
    if [ -s /run/secrets/ca_bundle ]; then echo "ca bundle seen"; fi; \\
    python3 /tmp/pkg/mkwheel.py /wheels; \\
    date +%s%N > /sdist/built-at.txt

FROM \${BASE_IMAGE} AS deps
ARG SOURCE_DATE_EPOCH
SHELL ["/bin/sh", "-eu", "-c"]
RUN echo 'lab:x:1000:1000:GRPO lab:/home/lab:/bin/sh' >> /etc/passwd; \\
    mkdir -p /home/lab /opt/grpolab /work/runs /cache; \\
    chmod 1777 /home/lab /work /work/runs /cache
RUN --mount=type=secret,id=ca_bundle \\
    python3 -m venv /opt/venv
RUN --mount=type=bind,from=source-builds,source=/wheels,target=/tmp/wheels \\
    --mount=type=cache,target=/root/.cache/pip \\
    --mount=type=secret,id=ca_bundle \\
    date +%s%N > /root/.cache/pip/last-build; \\
    /opt/venv/bin/pip install --no-index --disable-pip-version-check --cache-dir /root/.cache/pip /tmp/wheels/*.whl; \\
    /opt/venv/bin/python -c 'import demo; print(demo.VERSION)'

FROM \${DEPS} AS lab
ARG SOURCE_DATE_EPOCH
ARG TRACK_ENV=""
RUN printf '%s\n' "\${TRACK_ENV}" > /opt/grpolab/track.env
COPY app/ /opt/grpolab/app/
ARG GIT_REVISION=unknown
LABEL org.opencontainers.image.revision="\${GIT_REVISION}"
USER 1000:1000
WORKDIR /work
CMD ["/opt/venv/bin/python", "-c", "import demo; print(demo.VERSION)"]
EOF
    # The same file without `ARG SOURCE_DATE_EPOCH`: does the epoch then still enter the cache key?
    grep -v '^ARG SOURCE_DATE_EPOCH$' "$HOSTCTX/ctx/Dockerfile" > "$HOSTCTX/ctx/Dockerfile.noarg"
    cat > "$HOSTCTX/ctx/pkg/mkwheel.py" <<'EOF'
"""Write demo-1.0-py3-none-any.whl into argv[1], with fixed zip dates: the wheel is the same bytes every build."""
import base64, hashlib, sys, zipfile
files = {
    "demo/__init__.py": b"VERSION = '1.0'\n",
    "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
    "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: mkwheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
digest = lambda d: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
record = "".join(f"{n},sha256={digest(d)},{len(d)}\n" for n, d in files.items())
files["demo-1.0.dist-info/RECORD"] = (record + "demo-1.0.dist-info/RECORD,,\n").encode()
with zipfile.ZipFile(sys.argv[1] + "/demo-1.0-py3-none-any.whl", "w") as z:
    for name, data in files.items():
        z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
EOF
    printf "print('lab')\n" > "$HOSTCTX/ctx/app/main.py"
    printf 'x = 1\n' > "$HOSTCTX/ctx/app/util.py"
    echo "stand-in CA bundle: a build secret, in no layer" > "$HOSTCTX/ca.pem"
}

# facts TAG EPOCH: "<image id> <config digest> <diff_id,...> <history created values> <files newer than EPOCH per layer>",
# read from `docker save` (Docker 26 writes an OCI layout with a manifest.json beside it).
facts() {
    local tag=$1 epoch=$2 id
    id=$(D "docker image inspect --format '{{.Id}}' $tag") || { echo "none"; return; }
    D "docker save $tag -o out/save.tar" || { echo "$id unsaved"; return; }
    python3 - "$HOSTCTX/out/save.tar" "$epoch" "$id" <<'EOF'
import hashlib, json, sys, tarfile
path, epoch, image_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with tarfile.open(path) as t:
    read = lambda n: t.extractfile(n).read()
    m = json.loads(read("manifest.json"))[0]
    raw = read(m["Config"])
    config = json.loads(raw)
    newer = []
    for layer in m["Layers"]:
        with tarfile.open(fileobj=t.extractfile(layer)) as lt:
            newer.append(str(sum(1 for x in lt.getmembers() if x.mtime > epoch)))
created = sorted({h.get("created", "none") for h in config.get("history", [])})
print(image_id, "sha256:" + hashlib.sha256(raw).hexdigest(), ",".join(config["rootfs"]["diff_ids"]),
      "history_created=" + ",".join(created), "newer_than_epoch_per_layer=" + ",".join(newer))
EOF
    rm -f "$HOSTCTX/out/save.tar"
}

# build LOG CMD: run CMD in the chroot (after pruning the build cache unless NOPRUNE=1); prints "rc seconds".
build() {
    local logf=$1 cmd=$2 s rc
    [ "${NOPRUNE:-0}" = 1 ] || D 'docker builder prune -af >/dev/null'
    s=$(date +%s.%N)
    D "$cmd" > "$HOSTCTX/out/$logf.log" 2>&1; rc=$?
    echo "$rc $(printf '%.1f' "$(echo "$(date +%s.%N) - $s" | bc)")"
}

# way NAME TAG LOAD CMD: build twice (cache pruned, first image removed in between), compare, print one line.
# CMD may use @N@ for 1/2 (tag or file suffix); LOAD, if not "-", is run after each build (e.g. docker load).
way() {
    local name=$1 tag=$2 load=$3 cmd=$4 n f1 f2 r1 r2 verdict err=""
    for n in 1 2; do
        local c=${cmd//@N@/$n} l=${load//@N@/$n} t=${tag//@N@/$n}
        read -r rc secs < <(build "$name-$n" "$c")
        if [ "$rc" = 0 ] && [ "$l" != - ]; then D "$l" >> "$HOSTCTX/out/$name-$n.log" 2>&1 || rc=load-failed; fi
        if [ "$rc" != 0 ]; then
            err=$(grep -E 'ERROR|error' "$HOSTCTX/out/$name-$n.log" | tail -3 | tr '\n' ' ')
        fi
        local f; f=$(facts "$t" "$E1")
        if [ "$n" = 1 ]; then f1=$f; r1="rc=$rc ${secs}s"; else f2=$f; r2="rc=$rc ${secs}s"; fi
        [ "$n" = 1 ] && D "docker image rm -f $t >/dev/null 2>&1"
        [ "${KEEP_TARS:-0}" = 1 ] || D "rm -f out/$name-*.tar"
    done
    D "docker image rm -f ${tag//@N@/2} >/dev/null 2>&1"
    if [ "${f1%% *}" = none ] || [ "${f2%% *}" = none ]; then verdict=FAILED
    elif [ "$(echo "$f1" | cut -d' ' -f1-3)" = "$(echo "$f2" | cut -d' ' -f1-3)" ]; then verdict=SAME
    else verdict=DIFFERENT; fi
    case "$r1 $r2" in *rc=0*rc=0*) ;; *) verdict+=" (a build command failed: ${r1%% *}, ${r2%% *})";; esac
    local line="WAY $name: $verdict"
    line+=$'\n'"    build 1 ($r1): $f1"
    line+=$'\n'"    build 2 ($r2): $f2"
    [ -n "$err" ] && line+=$'\n'"    error: $err"
    local shown=${cmd//@N@/N}
    [ "$load" != - ] && shown+=" && ${load//@N@/N}"
    line+=$'\n'"    command: $shown"
    results+=("$line")
    echo "$line"
    [ "$name" = c2 ] && recommended=${verdict%% *}
}

BX="docker buildx build --progress=plain --provenance=false --sbom=false --secret id=ca_bundle,src=$CTX/ca.pem"

# RUN/COPY steps a plain-progress log says were CACHED, of all its RUN/COPY steps.
cached() {
    awk '/^#[0-9]+ \[[^]]+\] (RUN|COPY) / && !($1 in step) { step[$1] = 1; n++ } /^#[0-9]+ CACHED/ && ($1 in step) { c++ }
         END { printf "%d of %d RUN/COPY steps", c, n }' "$HOSTCTX/out/$1.log"
}

# A copy of the base whose one history entry has a `created` time (as a registry's images have; the stand-in,
# `docker import`ed, has none): tagged repro-base:history, in the running daemon's store.
base_with_history() {
    D "docker image inspect repro-base:history >/dev/null 2>&1" && return
    D "docker save $BASE_IMAGE -o out/base.tar" || return 1
    python3 - "$HOSTCTX/out/base.tar" "$HOSTCTX/out/base-h.tar" <<'PY'
import hashlib, io, json, sys, tarfile
src, dst = sys.argv[1:]
with tarfile.open(src) as t, tarfile.open(dst, "w") as out:
    m = json.loads(t.extractfile("manifest.json").read())
    config = json.loads(t.extractfile(m[0]["Config"]).read())
    for h in config["history"]:
        h.setdefault("created", config["created"])
    raw = json.dumps(config, separators=(",", ":")).encode()
    m[0]["Config"] = "blobs/sha256/" + hashlib.sha256(raw).hexdigest()
    m[0]["RepoTags"] = ["repro-base:history"]
    for member in t.getmembers():
        if member.isfile() and member.name not in ("manifest.json", "index.json", "repositories"):
            out.addfile(member, t.extractfile(member))
    for name, data in ((m[0]["Config"], raw), ("manifest.json", json.dumps(m).encode())):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))
PY
    D 'docker load -i out/base-h.tar >/dev/null; rm -f out/base.tar out/base-h.tar'
}

setup_root
write_context
take_base

# --- containerd image store (`"features": {"containerd-snapshotter": true}` in daemon.json) ---
start_dockerd containerd
way c0 "repro:c0-@N@" - "$BX --build-arg SOURCE_DATE_EPOCH=$E1 --load -t repro:c0-@N@ ctx"
way c1 "repro:c1-@N@" - "$BX --build-arg SOURCE_DATE_EPOCH=$E1 --output type=docker,name=repro:c1-@N@,rewrite-timestamp=true ctx"
way c2 "repro:c2-@N@" - "$BX --build-arg SOURCE_DATE_EPOCH=$E1 --output type=docker,name=repro:c2-@N@,rewrite-timestamp=true,dest=- ctx | docker load"
KEEP_TARS=1 way c3 "repro:c3-@N@" "docker load -i out/c3-@N@.tar" "$BX --build-arg SOURCE_DATE_EPOCH=$E1 --output type=docker,name=repro:c3-@N@,rewrite-timestamp=true,dest=out/c3-@N@.tar ctx"
D 'rm -f out/c3-2.tar'
way c2-noarg "repro:cn-@N@" - "$BX -f ctx/Dockerfile.noarg --build-arg SOURCE_DATE_EPOCH=$E1 --output type=docker,name=repro:cn-@N@,rewrite-timestamp=true,dest=- ctx | docker load"
way d-containerd "repro:dc-@N@" - "DOCKER_BUILDKIT=1 docker build --build-arg SOURCE_DATE_EPOCH=$E1 --secret id=ca_bundle,src=$CTX/ca.pem -t repro:dc-@N@ ctx"

# Does a new SOURCE_DATE_EPOCH reuse cached layers? The recommended way, the cache kept: E1, E1 again, then E2.
for df in Dockerfile Dockerfile.noarg; do
    D 'docker builder prune -af >/dev/null'
    k=0
    for e in "$E1" "$E1" "$E2"; do
        k=$((k + 1))
        read -r rc secs < <(NOPRUNE=1 build "cache-$df-$k" "$BX -f ctx/$df --build-arg SOURCE_DATE_EPOCH=$e --output type=docker,name=repro:cache,rewrite-timestamp=true,dest=- ctx | docker load")
        line="CACHE $df: build $k at epoch $e (rc=$rc, ${secs}s): $(cached "cache-$df-$k") CACHED; image $(D 'docker image inspect --format "{{.Id}}" repro:cache')"
        results+=("$line"); echo "$line"
    done
done

# FROM an image built at E1 (the `--target deps` image, as `invoke build` makes it), in a build at E2 > E1 and at
# E0 < E1: are its layers kept byte for byte?
read -r rc secs < <(build from-deps "$BX --target deps --build-arg SOURCE_DATE_EPOCH=$E1 --output type=docker,name=repro:deps-e1,rewrite-timestamp=true,dest=- ctx | docker load")
deps_facts=$(facts repro:deps-e1 "$E1")
deps_layers=$(echo "$deps_facts" | cut -d' ' -f3)
line="FROM: repro:deps-e1 built at $E1 (rc=$rc, ${secs}s): $deps_facts"
results+=("$line"); echo "$line"
for e in "$E2" "$E0"; do
    read -r rc secs < <(build "from-lab-$e" "$BX --build-arg DEPS=repro:deps-e1 --build-arg SOURCE_DATE_EPOCH=$e --output type=docker,name=repro:lab-$e,rewrite-timestamp=true,dest=- ctx | docker load")
    lab_facts=$(facts "repro:lab-$e" "$e")
    lab_layers=$(echo "$lab_facts" | cut -d' ' -f3)
    if [ "${lab_layers#"$deps_layers",}" != "$lab_layers" ]; then kept=KEPT; else kept=CHANGED; fi
    line="FROM repro:deps-e1 (epoch $E1) in a build at $e (rc=$rc, ${secs}s): its layers $kept; lab: $lab_facts"
    results+=("$line"); echo "$line"
done
D "docker image rm -f repro:deps-e1 repro:lab-$E2 repro:lab-$E0 repro:cache >/dev/null 2>&1; docker builder prune -af >/dev/null"

# --- classic image store (Docker's default through 28) ---
start_dockerd classic
way a "repro:a-@N@" - "$BX --build-arg SOURCE_DATE_EPOCH=$E1 --load -t repro:a-@N@ ctx"
base_with_history
way a-history "repro:ah-@N@" - "$BX --build-arg BASE_IMAGE=repro-base:history --build-arg SOURCE_DATE_EPOCH=$E1 --load -t repro:ah-@N@ ctx"
way b "repro:b-@N@" "docker load -i out/b-@N@.tar" "$BX --build-arg SOURCE_DATE_EPOCH=$E1 --output type=docker,name=repro:b-@N@,rewrite-timestamp=true,dest=out/b-@N@.tar ctx"
way b-image "repro:bi-@N@" - "$BX --build-arg SOURCE_DATE_EPOCH=$E1 --output type=image,name=repro:bi-@N@,rewrite-timestamp=true ctx"
way d "repro:d-@N@" - "DOCKER_BUILDKIT=1 docker build --build-arg SOURCE_DATE_EPOCH=$E1 --secret id=ca_bundle,src=$CTX/ca.pem -t repro:d-@N@ ctx"
# The tarball c3 made (rewrite-timestamp) loaded into the classic store, as a docker-container builder's --load does.
D 'docker load -i out/c3-1.tar >/dev/null && rm -f out/c3-1.tar'
line="LOAD c3's tarball into the classic store: $(facts repro:c3-1 "$E1")"
results+=("$line"); echo "$line"
D 'docker image rm -f repro:c3-1 repro-base:history >/dev/null 2>&1; docker builder prune -af >/dev/null; docker image prune -f >/dev/null'

stop_dockerd
rm -f "$HOSTCTX/base.tar"
echo
echo "=== summary (total $(( $(date +%s) - T0 ))s; build logs in $HOSTCTX/out) ==="
printf '%s\n' "${results[@]}"
echo "recommended way (c2) $recommended"
[ "$recommended" = SAME ]
exit $?

# RESULTS
#
# Seen 2026-12-03 on a 2-core Debian 12 VM (host docker.io 20.10.24, untouched), trixie docker.io 26.1.5+dfsg1
# (BuildKit 0.13; Debian's build reports v0.0.0+unknown), docker-buildx 0.13.1, base grpolab-base:trixie-amd64.
# Whole script: 323 s with the chroot already made; 528 s and 494 s from nothing (mmdebstrap of the chroot: 23-45 s)
# on a host busy with another session's builds. One build: 5-15 s (2x when the host is busy), cache pruned.
# Four runs, two different bases (the host's tag was rebuilt between them); for each base every run gave the same
# c1/c2/c3 ids:
#   base config 6aee2c8f (layer 8c6daceb): c2 image id (manifest) sha256:e9dab3d098551256730e33e25202b6b26ccf072d634b2bd4fafbcd10107b5ec6,
#                                           config sha256:9b07a0daed74945f1e3546b79ce1be15b18c9572fbb496c1c1b008ecf58c285d
#   base config 65d6b2c9 (layer 01872775): c2 image id (manifest) sha256:b8ee62a802fe4b1789aaf4d04b7cf9ddce85dfa242e8da1803c2b8981a8e51e8,
#                                           config sha256:e975cf04b62fff57101986525ae9e6d79517c5e62cb81a531d7127da841ca95a
#
#   c2  containerd store, `docker buildx build --provenance=false --sbom=false --build-arg SOURCE_DATE_EPOCH=E
#       --output type=docker,name=T,rewrite-timestamp=true,dest=- . | docker load`: SAME (ids above); every new
#       layer's files at <= E, every history `created` = E (the base's too, which has none of its own).
#   c3  the same to a file (dest=FILE, then `docker load -i FILE`): SAME, c2's ids.
#   c3's tarball loaded into the classic store: image id = c2's config digest, the same diff ids. (So a
#       docker-container builder's --load, which is `docker load` of such a tarball, should give the same on a
#       classic store; not run here: that builder needs the moby/buildkit image from a registry.)
#   c1  containerd store, --load or `--output type=docker|image,name=T,rewrite-timestamp=true` (no dest): exits 1,
#       `ERROR: failed to solve: exporter option "rewrite-timestamp" conflicts with "unpack"` (unpack=false is
#       overridden), yet the image is stored under T, with c2's ids, and runs (unpacked on first use).
#   c0  containerd store, --load without rewrite-timestamp: DIFFERENT (config and history times = E, but the
#       RUN/COPY layers hold build-time mtimes).
#   c2-noarg  c2 on the Dockerfile without `ARG SOURCE_DATE_EPOCH` in the stages: DIFFERENT: the venv's and pip's
#       .pyc files (411 in the venv layer) are timestamp-based; only a declared ARG puts SOURCE_DATE_EPOCH in RUN's
#       environment, which switches py_compile to checked-hash .pyc.
#   a   classic store (the engine's moby exporter), --load: DIFFERENT. Config `created` = E and every new history
#       entry = E; the base's history entry, which has no `created` (a `docker import`ed stand-in), gets the wall
#       clock; layers hold build-time mtimes (and /run and /tmp mount-point dirs, absent from the containerd
#       store's layers). a-history (a base whose history has `created`): that entry keeps its own time; still
#       DIFFERENT (layers).
#   b   classic store, `--output type=docker,dest=FILE,rewrite-timestamp=true`: refused, rc 1, in 0.1 s:
#       "ERROR: Docker exporter is not supported for the docker driver. / Switch to a different driver, or turn on
#       the containerd image store, and try again." (type=oci,dest=: "OCI exporter is not supported for the docker
#       driver.") b-image, `--output type=image,rewrite-timestamp=true`: accepted, silently ignored, DIFFERENT.
#   d   `DOCKER_BUILDKIT=1 docker build` on 26.1.5 is buildx ("building with "default" instance using docker
#       driver"): classic store DIFFERENT as a; containerd store DIFFERENT: default provenance attestation (the id
#       is an index with an attestation manifest) and no rewrite. With a CLI that has no buildx plugin (Docker's
#       28.2.2 here): "ERROR: BuildKit is enabled but the buildx component is missing or broken."; DOCKER_BUILDKIT=0
#       (the legacy builder): "the --mount option requires BuildKit".
#   Cache: with `ARG SOURCE_DATE_EPOCH` in the stages, a build at E2 after one at E1 reused 0 of 6 RUN/COPY steps
#       (at E1 again: 6 of 6); without the ARG, 6 of 6 at E2 (the image is then stamped E2, but see c2-noarg).
#   FROM: the `--target deps` image built at E1, then the lab on it (DEPS=that image) at E2 > E1 and at E0 < E1:
#       its layers KEPT byte for byte in both; rewrite-timestamp rewrites only the layers the build makes (the
#       base's layer, 5517 files newer than E, is kept too). The lab's own layers and history carry its epoch.
#   Once (1 of ~90 builds, host busy): a c2-style build printed "sending tarball ... done" and `docker load` loaded
#       the image, then buildx exited 1 with "ERROR: failed to solve: not found"; its cache was not kept.
#   Never run `dockerd --bridge none` in the host's network namespace: at start it deletes the interface docker0,
#   the host dockerd's bridge (this script's first version did; docker0 was re-created by hand with its address).

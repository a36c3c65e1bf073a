#!/bin/sh
# The image's ENTRYPOINT. `shell` opens bash; anything else goes to the lab (`python -m grpolab ARGS`),
# whose exit status becomes the container's: smoke, lab, doctor, estimate, tiny-model.
set -eu

# The track's runtime environment (its `env` in images/tracks.toml), written at build time. A variable the
# user already set (docker run -e, compose environment) wins.
track_env=${GRPOLAB_TRACK_ENV_FILE:-/opt/grpolab/track.env}
if [ -f "$track_env" ]; then
    while IFS= read -r line; do
        case "$line" in ''|'#'*) continue ;; esac
        key=${line%%=*}
        if eval "[ -z \"\${$key+set}\" ]"; then eval "export $line"; fi
    done < "$track_env"
fi

# Bytecode of this image's files only. An image built from git gives every file the same mtime (its commit's), and
# Python accepts a cached .pyc whose source mtime and size match: one that another image left in the shared cache
# volume, for another version of the same file, passed (cv's numpy failed to import one of c's). So a folder per image
# (its id, which Compose hands in), else per lock.
case "${GRPOLAB_IMAGE:-}" in sha256:*) image_key=$GRPOLAB_IMAGE ;; *) image_key=${GRPOLAB_LOCK_SHA256:-} ;; esac
if [ -n "${PYTHONPYCACHEPREFIX:-}" ] && [ -n "$image_key" ]; then
    export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX}/${image_key#sha256:}"
fi

case "${1:-}" in
    shell) shift
        # An interactive shell says once where packages live, since pip there acts on the lab's venv, the lock's.
        if [ "$#" -eq 0 ]; then
            if [ -w /opt/venv/bin ]; then
                echo "grpolab: pip and uv pip act on the lab's venv (/opt/venv, the track's lock); what you install leaves the lock and goes with this container. For good: docs/locks-and-images.md, Packages at the image's shell" >&2
            else
                echo "grpolab: pip and uv pip act on the lab's venv (/opt/venv, the track's lock), which this user cannot change: for this session, pip install --target /tmp/extra PKG and PYTHONPATH=/tmp/extra; for good: docs/locks-and-images.md, Packages at the image's shell" >&2
            fi
        fi
        exec bash "$@" ;;
    bench) shift; exec python -m grpolab.bench "$@" ;;  # the benchmarks and CI's proofs: never a learner's command
    *) exec python -m grpolab "$@" ;;
esac

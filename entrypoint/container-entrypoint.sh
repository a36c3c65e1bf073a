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

case "${1:-}" in
    shell) shift; exec bash "$@" ;;
    *) exec python -m grpolab "$@" ;;
esac

#!/usr/bin/env bash
# The verl check environment: .venvs/verl-check, verl 0.9.1 with its own pins (vLLM, torch, transformers),
# which cannot share an environment with our TRL stack. tests/test_verl_export.py runs verl's own code in it
# to check an exported bundle offline (no GPU needed: PyPI's torch is a CUDA build that also runs on a CPU).
#
#   bash images/verl-check.sh          create or update the venv from lockfiles/verl-check.txt (idempotent:
#                                      a venv already synced to this lock is left as it is)
#   bash images/verl-check.sh --lock   re-resolve lockfiles/verl-check.txt from lockfiles/verl-check.in
#   bash images/verl-check.sh --test   create or update it, then run tests/test_verl_export.py
#
# GRPOLAB_VERL_VENV moves the venv. About 10 GB on disk; built from PyPI in about a minute here.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GRPOLAB_VERL_VENV:-$REPO/.venvs/verl-check}"
IN="$REPO/lockfiles/verl-check.in"
LOCK="$REPO/lockfiles/verl-check.txt"
# The lock is resolved for this interpreter version and platform; the venv is made with the same.
PYTHON_VERSION=3.11
PLATFORM=x86_64-unknown-linux-gnu
STAMP="$VENV/.grpolab-lock-sha256"

case "${1:-}" in
  --lock)
    uv pip compile "$IN" --generate-hashes --python-version "$PYTHON_VERSION" --python-platform "$PLATFORM" \
      --custom-compile-command "bash images/verl-check.sh --lock" -o "$LOCK"
    exit 0 ;;
  ""|--test) ;;
  *) echo "usage: bash images/verl-check.sh [--lock | --test]" >&2; exit 2 ;;
esac

want="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  echo "verl-check: $VENV is already synced to $(basename "$LOCK")"
else
  start=$SECONDS
  [[ -x "$VENV/bin/python" ]] || uv venv --quiet --python "$PYTHON_VERSION" "$VENV"
  rm -f "$STAMP"
  # --require-hashes: every wheel is the one the lock resolved; sync also removes anything not in the lock.
  VIRTUAL_ENV="$VENV" uv pip sync --quiet --require-hashes "$LOCK"
  echo "$want" > "$STAMP"
  echo "verl-check: $VENV synced to $(basename "$LOCK") in $((SECONDS - start)) s"
fi

if [[ "${1:-}" == "--test" ]]; then
  cd "$REPO"
  exec python3 -m pytest -q tests/test_verl_export.py
fi

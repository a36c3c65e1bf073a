# Sourced by the GPU checks in this folder, with the name of the check:
#   source "$(dirname "${BASH_SOURCE[0]}")/common.sh" gpu-check
# The repository root as working directory, the lab's code on PYTHONPATH, a logs folder ($OUT where the
# device machine gives one, else runs/NAME), and the checks' convention: each prints PASS or FAIL, and the
# script's exit status is the number of failures.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
export PYTHONPATH="$REPO/entrypoint${PYTHONPATH:+:$PYTHONPATH}"
LOGS="${OUT:-$REPO/runs/$1}"
mkdir -p "$LOGS"
FAILURES=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; FAILURES=$((FAILURES + 1)); }
# The number of CUDA GPUs the torch of interpreter $1 sees (0 when it has none or no torch).
gpu_count() { "$1" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0; }
# TRL and datasets, which such a machine lacks, from the wheels carried in .whl/ (made where PyPI is reachable by
# `bash images/gpu/memory_check.sh --prepare-wheels`), unless they already import; exits with FAIL when neither.
use_carried_wheels() {
  python3 -c 'import trl, datasets' 2>/dev/null && return 0
  ls "$REPO/.whl"/*.whl >/dev/null 2>&1 || { echo "FAIL  TRL or datasets missing and no wheels in $REPO/.whl: run images/gpu/memory_check.sh --prepare-wheels where PyPI is reachable"; exit 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/grpolab-site "$REPO/.whl"/*.whl \
    || { echo "FAIL  installing the carried wheels from $REPO/.whl"; exit 1; }
  export PYTHONPATH="$PYTHONPATH:/tmp/grpolab-site"
}

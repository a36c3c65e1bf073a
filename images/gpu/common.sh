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

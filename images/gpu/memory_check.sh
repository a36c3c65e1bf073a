#!/usr/bin/env bash
# Peak memory on one CUDA GPU: the estimate's terms against torch.cuda.max_memory_allocated (issue 10, section 1).
#
# For a bare x86_64 CUDA machine with Python 3.12, PyTorch, transformers, PEFT and accelerate, and no TRL, datasets,
# vLLM, Docker or network. What it lacks travels as wheels in .whl/ (ignored by git), prepared where PyPI is
# reachable, at the versions of track n's lock:
#     bash images/gpu/memory_check.sh --prepare-wheels        # here: trl, datasets, dill, multiprocess (~2 MB)
#     bash images/gpu/memory_check.sh                         # there: installs .whl/ into /tmp, then the cases
#     bash images/gpu/memory_check.sh --dry-run               # anywhere: the small-shape case on the CPU
#
# Cases (grpolab.bench.memory_cases GPU_CASES), each in a process of its own: the Qwen3-0.6B and Qwen3-1.7B shapes,
# randomly initialised from their configs (no download), bf16, in-process rollouts, 8 completions of up to 128
# tokens, 3 GRPO steps with TRL's GRPOTrainer and a rank-16 LoRA (the lab's own make_trainer), gradient
# checkpointing on as on every GPU track. Each prints the predicted terms, max_memory_allocated and
# max_memory_reserved above the baseline, the device-wide use, and the ratio; PASS when within 15%.
# Logs: $OUT (or runs/memory-check) holds each case's output and JSON. Exit status: the number of failures.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" memory-check
WHEELS="$REPO/.whl"
CARRIED=(trl datasets dill multiprocess)  # what such a machine lacks of the lab's image-side dependencies

if [[ "${1:-}" == "--prepare-wheels" ]]; then
  mkdir -p "$WHEELS"
  for name in "${CARRIED[@]}"; do
    pin="$(grep -m1 -E "^$name==" lockfiles/n.txt | cut -d' ' -f1)"
    [[ -n "$pin" ]] || { echo "FAIL  $name is not in lockfiles/n.txt"; exit 1; }
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
      -d "$WHEELS" "$pin" || { echo "FAIL  downloading $pin"; exit 1; }
  done
  echo "wheels for the GPU machine in $WHEELS ($(du -sh "$WHEELS" | cut -f1)); carry .whl with the working tree"
  exit 0
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
use_carried_wheels
python3 -c 'import torch, transformers, peft, trl, datasets; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__, "trl", trl.__version__, "datasets", datasets.__version__)' \
  || { echo "FAIL  the lab's libraries do not import"; exit 1; }

if [[ "${1:-}" == "--dry-run" ]]; then
  DEVICE=cpu; CASES=(small-shape)
else
  GPUS="$(gpu_count python3)"
  [[ "$GPUS" -ge 1 ]] || { echo "FAIL  no CUDA GPU visible to torch: this check measures GPU memory (use --dry-run to test the script on a CPU)"; exit 1; }
  # GRPOLAB_GPU_CASES="qwen3-1.7b-shape-bf16": only the cases named, where device time is short
  DEVICE=cuda; read -r -a CASES <<<"${GRPOLAB_GPU_CASES:-qwen3-0.6b-shape-bf16 qwen3-1.7b-shape-bf16}"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
fi

for case in "${CASES[@]}"; do
  if timeout 240 python3 -m grpolab.bench memory --case "$case" --device "$DEVICE" --out "$LOGS/$case.json" >"$LOGS/$case.txt" 2>&1; then
    python3 - "$LOGS/$case.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["measured"]
print(f"{r['case']}: {r['dtype']} on {r['device']}, {r['settings']['per_device_train_batch_size']} completions of up to {r['settings']['max_completion_length']} tokens")
for t in r["predicted"]["terms"]:
    print(f"  predicted  {t['name']:<42} {t['gb']:7.3f} GB  ({t['note']})")
print(f"  predicted  {'modelled total':<42} {r['predicted']['modelled_gb']:7.3f} GB")
print(f"  measured   {'peak above the baseline':<42} {m['peak_memory_gb_measured']:7.3f} GB  ({m['peak_memory_basis']})")
for name, gb in m["peak_memory_parts"].items():
    print(f"  measured   {name:<42} {gb:7.3f} GB")
print(f"  ratio predicted/measured {r['ratio_predicted_over_measured']}")
sys.exit(0 if r["within_15_percent"] else 3)
EOF
    status=$?
    if [[ "$DEVICE" == cpu ]]; then pass "$case: dry run on the CPU ran end to end (the 15% target is the GPU cases')"
    elif [[ $status -eq 0 ]]; then pass "$case: predicted within 15% of max_memory_allocated"; else fail "$case: predicted more than 15% off (see above)"; fi
  else
    fail "$case (exit $?): $(tail -5 "$LOGS/$case.txt")"
  fi
done
exit "$FAILURES"

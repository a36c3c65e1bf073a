#!/usr/bin/env bash
# Peak memory on one CUDA GPU, per phase: the estimate's terms (its CUDA terms included, grpolab.memory.cuda_terms)
# against torch.cuda.max_memory_allocated, for the generation, the update and the whole run (issue 10, issue 52).
#
# For a bare x86_64 CUDA machine with Python 3.12, PyTorch, transformers, PEFT and accelerate, and no TRL, datasets,
# vLLM, Docker or network. What it lacks travels as wheels in .whl/ (ignored by git: carry it with the working tree),
# prepared where PyPI is reachable, at the versions of track n's lock:
#     bash images/gpu/memory_check.sh --prepare-wheels        # here: trl, datasets, dill, multiprocess (~2 MB)
#     bash images/gpu/memory_check.sh                         # there: installs .whl/ into /tmp, then the cases
#     bash images/gpu/memory_check.sh --dry-run               # anywhere: the small-shape case on the CPU
#
# Cases (grpolab.bench.memory_cases GPU_CASES), each in a process of its own: the Qwen3-0.6B and Qwen3-1.7B shapes,
# randomly initialised from the built-in shape table's config (no download), bf16, in-process rollouts (no vLLM), 8
# completions of up to 128 tokens, 3 GRPO steps with TRL's GRPOTrainer and a rank-16 LoRA (the lab's own make_trainer),
# gradient checkpointing on as on every GPU track. The cases share one budget, GRPOLAB_GPU_BUDGET_S seconds (default
# 450: the script ends within 8 minutes), the 0.6B case first. Each prints the predicted terms, then predicted against
# measured (above the runtime baseline) for the generation phase, the update phase and the total, with the CUDA
# terms' status; PASS when the total is within 15%. Logs: $OUT (or runs/memory-check) holds each case's output and
# JSON, and memory-check.json: every case's record, the machine and the versions. Exit status: the number of failures.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" memory-check
WHEELS="$REPO/.whl"
CARRIED=(trl datasets dill multiprocess)  # what such a machine lacks of the lab's image-side dependencies
BUDGET_S="${GRPOLAB_GPU_BUDGET_S:-450}"
FIRST_CASE_MAX_S=210  # the 0.6B case's share at most: the 1.7B case, about three times the weights, gets the rest

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

START_S=$SECONDS
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
use_carried_wheels
VERSIONS="$(python3 -c 'import torch, transformers, peft, trl, datasets; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__, "trl", trl.__version__, "datasets", datasets.__version__)')" \
  || { echo "FAIL  the lab's libraries do not import"; exit 1; }
echo "$VERSIONS"

if [[ "${1:-}" == "--dry-run" ]]; then
  DEVICE=cpu; CASES=(small-shape); MACHINE="$(uname -m) CPU (dry run)"
else
  GPUS="$(gpu_count python3)"
  [[ "$GPUS" -ge 1 ]] || { echo "FAIL  no CUDA GPU visible to torch: this check measures GPU memory (use --dry-run to test the script on a CPU)"; exit 1; }
  # GRPOLAB_GPU_CASES="qwen3-1.7b-shape-bf16": only the cases named, where device time is short
  DEVICE=cuda; read -r -a CASES <<<"${GRPOLAB_GPU_CASES:-qwen3-0.6b-shape-bf16 qwen3-1.7b-shape-bf16}"
  MACHINE="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "GPU: $MACHINE"
fi

RECORDS=(); RUN=0
for case in "${CASES[@]}"; do
  left=$((BUDGET_S - (SECONDS - START_S)))
  limit=$(( RUN == 0 && ${#CASES[@]} > 1 && left > FIRST_CASE_MAX_S ? FIRST_CASE_MAX_S : left )); RUN=$((RUN + 1))
  if (( limit < 30 )); then fail "$case: not run, ${left} s left of the ${BUDGET_S} s budget"; continue; fi
  case_start=$SECONDS
  if timeout "$limit" python3 -m grpolab.bench memory --case "$case" --device "$DEVICE" --out "$LOGS/$case.json" >"$LOGS/$case.txt" 2>&1; then
    RECORDS+=("$LOGS/$case.json")
    python3 - "$LOGS/$case.json" "$((SECONDS - case_start))" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["seconds"] = int(sys.argv[2])
json.dump(r, open(sys.argv[1], "w"), indent=2)
s, m = r["settings"], r["measured"]
print(f"{r['case']}: {r['dtype']} on {r['device']}, {s['per_device_train_batch_size']} completions of up to {s['max_completion_length']} tokens, {r['steps_run']} steps, {r['seconds']} s")
for t in r["predicted"]["terms"]:
    print(f"  predicted  {t['name']:<42} {t['gb']:7.3f} GB  ({t['note']})")
if r["predicted"]["freed_before_update_gb"]:
    print(f"  predicted  {'Freed before the update':<42} {-r['predicted']['freed_before_update_gb']:7.3f} GB")
print(f"  measured   {m['peak_memory_basis']}; runtime baseline {m['runtime_baseline_gb']:.3f} GB")
print(f"  {'phase':<12} {'predicted':>10} {'measured':>10} {'ratio':>7}   (GB above the runtime baseline)")
for phase, row in r["phases"].items():
    measured = "-" if row["measured_gb"] is None else f"{row['measured_gb']:.3f}"
    print(f"  {phase:<12} {row['predicted_gb']:10.3f} {measured:>10} {row['ratio'] or '-':>7}")
cuda = r["predicted"]["cuda_terms"]
print(f"  CUDA terms: {cuda['status']}" if cuda else "  CUDA terms: none used on this device")
sys.exit(0 if r["within_15_percent"] else 3)
EOF
    status=$?
    if [[ "$DEVICE" == cpu ]]; then pass "$case: dry run on the CPU ran end to end (the 15% target is the GPU cases')"
    elif [[ $status -eq 0 ]]; then pass "$case: predicted total within 15% of max_memory_allocated"; else fail "$case: predicted total more than 15% off (see above)"; fi
  else
    fail "$case (exit $?, limit ${limit} s): $(tail -5 "$LOGS/$case.txt")"
  fi
done

PREDICTED=()
if [[ "$DEVICE" == cpu ]]; then
  # The dry run's second half: what the GPU cases will be held to there, CUDA terms included, made here as run_case
  # makes it (the cases' data and shapes), with no GPU.
  for case in qwen3-0.6b-shape-bf16 qwen3-1.7b-shape-bf16; do
    if python3 -m grpolab.bench memory --case "$case" --device cuda --predict-only --out "$LOGS/$case.predicted.json" >"$LOGS/$case.predicted.txt" 2>&1; then
      PREDICTED+=("$LOGS/$case.predicted.json")
      python3 - "$LOGS/$case.predicted.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["predicted"]
phases = ", ".join(f"{phase} {gb:.3f} GB" for phase, gb in p["phases_gb"].items())
print(f"{r['case']} on cuda, predicted here: {phases}, total {p['modelled_gb']:.3f} GB ({p['cuda_terms']['status']})")
EOF
      pass "$case: its prediction on cuda made without a GPU"
    else
      fail "$case: no prediction on cuda: $(tail -3 "$LOGS/$case.predicted.txt")"
    fi
  done
fi

python3 - "$LOGS/memory-check.json" "$MACHINE" "$VERSIONS" "$BUDGET_S" "$((SECONDS - START_S))" "${RECORDS[*]}" "${PREDICTED[*]}" <<'EOF'
import json, sys
out, machine, versions, budget, elapsed, measured, predicted = sys.argv[1:]
cases = [json.load(open(f)) for f in measured.split()]
json.dump({"what": "images/gpu/memory_check.sh: the memory estimate against the measured peak, per phase",
           "machine": machine, "versions": versions, "budget_s": int(budget), "elapsed_s": int(elapsed),
           "cases": cases, "predicted_only": [json.load(open(f)) for f in predicted.split()]}, open(out, "w"), indent=2)
print(f"wrote {out}: {len(cases)} case(s) measured in {elapsed} s")
EOF
exit "$FAILURES"

#!/usr/bin/env bash
# What the lab's observers cost on one CUDA GPU, against plain TRL on the same settings (issue 22, sections 2-3).
#
# For a bare x86_64 CUDA machine with Python 3.12, PyTorch, transformers, PEFT and accelerate, and no TRL, datasets,
# Docker or network: the wheels it lacks travel in .whl/, made where PyPI is reachable by
#     bash images/gpu/memory_check.sh --prepare-wheels
# then here:
#     bash images/gpu/versus_trl_check.sh              # on the GPU (GRPOLAB_GPU_ROUNDS=2: 2 rounds, not 3)
#     bash images/gpu/versus_trl_check.sh --dry-run    # anywhere: one round of each variant on the CPU, 10 steps
#
# Variants (python -m grpolab.bench plain-trl: TRL's GRPOTrainer built as its documentation shows it, on track c's lab
# settings and the committed tiny model, float32), each in a process of its own, interleaved over 3 rounds:
#   plain       plain TRL
#   meter       plus the peak-memory meter as the lab runs it on CUDA: torch.cuda.mem_get_info() polled every 20 ms
#               from a second thread
#   unsampled   plus the meter with that thread off (max_memory_allocated only)
#   checks      plus the lab's step recorder, per-step checks and progress line
# Prints each variant's median seconds per step (transformers' train_runtime / steps) and the cost of the polling
# thread (meter against unsampled); PASS when the polling costs under 2% of a step. JSON lines in $LOGS.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" versus-trl
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
use_carried_wheels

if [[ "${1:-}" == "--dry-run" ]]; then
  DEVICE=cpu; ROUNDS=1; STEPS=10  # track c logs every 10 steps: fewer would log none
else
  [[ "$(gpu_count python3)" -ge 1 ]] || { echo "FAIL  no CUDA GPU visible to torch (use --dry-run to test the script on a CPU)"; exit 1; }
  DEVICE=cuda; ROUNDS="${GRPOLAB_GPU_ROUNDS:-3}"; STEPS=40  # fewer rounds where device time is short
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
fi

for round in $(seq "$ROUNDS"); do
  for variant in plain meter unsampled checks; do
    observers=""; [[ "$variant" != plain ]] && observers="--observers $variant"
    # shellcheck disable=SC2086 # observers is two words or none
    result="$LOGS/$variant-$round.json"
    if timeout 300 python3 -m grpolab.bench plain-trl --device "$DEVICE" --max-steps "$STEPS" $observers --out "$result" >"$LOGS/$variant-$round.txt" 2>&1; then
      echo "{\"variant\": \"$variant\", \"round\": $round, \"result\": $(cat "$result")}" >>"$LOGS/runs.jsonl"
      echo "round $round  $variant  $(grep -o '"seconds_per_step": [0-9.]*' "$result" | head -1)"
    else
      fail "$variant, round $round: $(tail -5 "$LOGS/$variant-$round.txt")"
    fi
  done
done

python3 - "$LOGS/runs.jsonl" "$DEVICE" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
median = {}
for variant in ("plain", "meter", "unsampled", "checks"):
    values = [r["result"]["seconds_per_step"] for r in runs if r["variant"] == variant]
    if values:
        median[variant] = statistics.median(values)
        print(f"  {variant:<10} {median[variant]:.4f} s/step (median of {len(values)})")
for name, (a, b) in {"polling thread (meter - unsampled)": ("meter", "unsampled"), "meter (meter - plain)": ("meter", "plain"),
                     "recorder and checks (checks - plain)": ("checks", "plain")}.items():
    if a in median and b in median:
        print(f"  cost of the {name}: {median[a] - median[b]:+.4f} s/step ({median[a] / median[b] - 1:+.1%})")
polling = median["meter"] / median["unsampled"] - 1 if {"meter", "unsampled"} <= set(median) else None
if sys.argv[2] == "cpu":
    print("PASS  dry run on the CPU ran end to end (the 2% target is the GPU's)")
elif polling is not None and polling < 0.02:
    print(f"PASS  polling mem_get_info every 20 ms costs {polling:+.1%} of a step")
else:
    print(f"FAIL  polling mem_get_info every 20 ms costs {polling if polling is None else f'{polling:+.1%}'} of a step")
    sys.exit(1)
EOF
[[ $? -eq 0 ]] || FAILURES=$((FAILURES + 1))
exit "$FAILURES"

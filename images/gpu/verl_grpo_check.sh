#!/usr/bin/env bash
# The exported verl bundle on a real GPU: a few GRPO steps, at most ~10 minutes on one GPU.
# PREPARED, NOT YET RUN: no GPU was available when it was written (the bundle is validated offline only).
#
# What it expects (the GPU machine has no network and no Docker):
#   - run from the repository root, with a Python that has verl 0.9.1 and its vLLM (the cluster image's
#     environment, or .venvs/verl-check made by images/verl-check.sh): VERL_PYTHON=/path/to/python, default
#     .venvs/verl-check/bin/python, else python3. The export runs in the same Python (it needs only datasets,
#     pyarrow, transformers, tokenizers and torch, which verl's environment has);
#   - a small model on local disk: GRPOLAB_GPU_MODEL=/path/to/Qwen3-0.6B (a saved HF folder), else the
#     built-in tiny model (committed in entrypoint/tiny-model/), which learns the
#     arithmetic task within a few dozen steps;
#   - one GPU.
#
# Checks, in order (each prints PASS/FAIL; the exit status is the number of failures):
#   1. verl and vLLM import; verl's version is the one the export was checked against.
#   2. the export writes a bundle for 1 node x 1 GPU, and the bundle's check.py passes (compose, verl's
#      validation, RLHFDataset, reward loader) in this environment.
#   3. run.sh trains STEPS GRPO steps (held-out pass@1 before and after, via verl's validation) and exits 0.
#   4. the reward moves: mean critic/score/mean over the last 5 steps is above the first 5 steps'.
#   5. the adapter reaches the rollout engine (verl#7495, #7413: adapters silently not delivered):
#      a. held-out pass@1 after training differs from before: validation is greedy decoding *by vLLM*, so a
#         vLLM that never received the adapter answers exactly as before;
#      b. vLLM's log-probs of its own samples agree with the trained actor's (training/rollout_probs_diff_mean
#         stays small, within max(0.05, 3 x step 1's)); a stale rollout engine drifts away as the adapter trains.
# Logs: $OUT (or runs/gpu-verl-check) holds the bundle, train.log and metrics.jsonl.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" gpu-verl-check
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_LOGGING_LEVEL=WARNING TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
export GRPOLAB_CACHE_DIR="${GRPOLAB_CACHE_DIR:-$REPO/.cache/gpu}"
STEPS="${GRPOLAB_VERL_STEPS:-40}"
if [[ -n "${VERL_PYTHON:-}" ]]; then PY="$VERL_PYTHON"
elif [[ -x "$REPO/.venvs/verl-check/bin/python" ]]; then PY="$REPO/.venvs/verl-check/bin/python"
else PY=python3; fi
# run.sh calls `python3`: put the verl environment's interpreter first on PATH.
export PATH="$(dirname "$PY"):$PATH"

GPUS="$(gpu_count "$PY")"
echo "GPUs: $GPUS; python: $PY; logs in $LOGS"
[[ "$GPUS" -ge 1 ]] || { echo "FAIL  no CUDA GPU visible to torch"; exit 1; }

# 1. verl and vLLM, the versions the export was checked against.
if timeout 180 "$PY" - >"$LOGS/1-versions.txt" 2>&1 <<'EOF'
import verl, vllm
from grpolab.export.verl_mapping import VERL_VERSION
print(f"verl {verl.__version__}, vllm {vllm.__version__}")
assert verl.__version__ == VERL_VERSION, f"verl {verl.__version__}, but the export was checked against {VERL_VERSION}"
EOF
then pass "1 $(tail -1 "$LOGS/1-versions.txt")"; else fail "1 verl/vLLM: $(tail -3 "$LOGS/1-versions.txt")"; exit "$FAILURES"; fi

# 2. Export (the tiny model travels in the bundle) and check the bundle offline here.
BUNDLE="$LOGS/bundle"
rm -rf "$BUNDLE"
if timeout 600 "$PY" - "$BUNDLE" "${GRPOLAB_GPU_MODEL:-tiny}" "$STEPS" >"$LOGS/2-export.txt" 2>&1 <<'EOF'
import sys
from grpolab.export.verl import export_bundle
from grpolab.settings.lab_settings import LabSettings

bundle, model, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
# Track c's learning settings (they move the tiny model on CPU), in bfloat16 on vLLM colocated.
settings = LabSettings(track="cluster", model=model, dataset="arithmetic", train_size=8 * steps, heldout_size=200,
                       dtype="bfloat16", max_prompt_length=64, max_completion_length=16, num_generations=8,
                       per_device_train_batch_size=64, max_steps=steps, learning_rate=1e-3, rollout="vllm-colocate",
                       vllm_gpu_memory_utilization=0.3)
print(export_bundle(settings, bundle, nodes=1, gpus_per_node=1))
EOF
then
  if timeout 300 "$PY" "$BUNDLE/check.py" >"$LOGS/2-check.txt" 2>&1; then pass "2 export + check.py: $(tail -1 "$LOGS/2-check.txt" | cut -c1-200)"
  else fail "2 check.py refused the bundle: $(tail -1 "$LOGS/2-check.txt" | cut -c1-400)"; exit "$FAILURES"; fi
else fail "2 export: $(tail -3 "$LOGS/2-export.txt")"; exit "$FAILURES"; fi

# 3. Train. Eager vLLM (no CUDA-graph capture) to start fast; metrics to a JSON-lines file as well as the console.
export VERL_FILE_LOGGER_PATH="$LOGS/metrics.jsonl"
rm -f "$VERL_FILE_LOGGER_PATH"
if timeout 480 bash "$BUNDLE/run.sh" "trainer.logger=[console,file]" actor_rollout_ref.rollout.enforce_eager=true \
     "trainer.default_local_dir=$LOGS/checkpoints" >"$LOGS/train.log" 2>&1
then pass "3 run.sh: $STEPS steps"; else fail "3 run.sh (exit $?): $(grep -v '^\s*$' "$LOGS/train.log" | tail -5)"; fi

# 4 and 5. Read the metrics: the file logger's, else the console's "step:N - key:value - ..." lines.
timeout 60 "$PY" - "$LOGS" >"$LOGS/4-5-metrics.txt" 2>&1 <<'EOF'
import json, math, re, sys
from pathlib import Path

logs = Path(sys.argv[1])
steps = {}
jsonl = logs / "metrics.jsonl"
if jsonl.exists() and jsonl.stat().st_size:
    for line in jsonl.read_text().splitlines():
        row = json.loads(line)
        steps.setdefault(row["step"], {}).update(row["data"])
else:
    for line in (logs / "train.log").read_text(errors="replace").splitlines():
        m = re.search(r"step:(\d+) - (.*)", line)
        if m:
            for pair in m[2].split(" - "):
                key, _, value = pair.rpartition(":")
                try:
                    steps.setdefault(int(m[1]), {})[key] = float(value)
                except ValueError:
                    pass
def series(key):
    return [(s, v[key]) for s, v in sorted(steps.items()) if key in v and not (isinstance(v[key], float) and math.isnan(v[key]))]
score = series("critic/score/mean")
acc = [(s, v) for s, row in sorted(steps.items()) for k, v in row.items() if k.startswith("val-core/") and k.endswith("/acc/mean@1")]
diff = series("training/rollout_probs_diff_mean")
print("score", score)
print("val acc", acc)
print("rollout_probs_diff_mean", diff)
verdict = {}
if len(score) >= 10:
    first, last = sum(v for _, v in score[:5]) / 5, sum(v for _, v in score[-5:]) / 5
    verdict["4"] = (last > first, f"critic/score/mean {first:.3f} (first 5 steps) -> {last:.3f} (last 5)")
else:
    verdict["4"] = (False, f"only {len(score)} steps logged critic/score/mean")
if len(acc) >= 2:
    verdict["5a"] = (acc[-1][1] != acc[0][1], f"held-out pass@1 {acc[0][1]:.3f} (step {acc[0][0]}) -> {acc[-1][1]:.3f} (step {acc[-1][0]})")
else:
    verdict["5a"] = (False, f"held-out pass@1 logged {len(acc)} time(s), need before and after")
if diff:
    limit = max(0.05, 3 * diff[0][1])
    verdict["5b"] = (diff[-1][1] <= limit, f"rollout vs actor log-prob diff {diff[0][1]:.4f} (step {diff[0][0]}) -> {diff[-1][1]:.4f} (step {diff[-1][0]}), limit {limit:.4f}")
else:
    verdict["5b"] = (False, "training/rollout_probs_diff_mean was not logged")
for name, (ok, why) in verdict.items():
    print(("PASS  " if ok else "FAIL  ") + f"{name} {why}")
EOF
grep -E '^(PASS|FAIL)  ' "$LOGS/4-5-metrics.txt" || { fail "4/5 metrics could not be read: $(tail -3 "$LOGS/4-5-metrics.txt")"; }
FAILURES=$((FAILURES + $(grep -c '^FAIL  ' "$LOGS/4-5-metrics.txt")))
echo "failures: $FAILURES"
exit "$FAILURES"

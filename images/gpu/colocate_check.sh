#!/usr/bin/env bash
# vLLM colocate against in-process generation on one CUDA GPU, each step split the way `invoke bench.colocate
# --case qwen3-0.6b-shape` splits it on the CPU (issue 29, section 3): generation, weight sync, the lab's sync
# check, TRL's importance-sampling pass (old_logprobs), reward and update, and the wrapper the trainer put
# around the model (none, or DDP with its find_unused_parameters).
#
# For a bare x86_64 CUDA machine with Python 3.12, PyTorch, transformers, PEFT, accelerate and matplotlib, and no
# TRL, datasets, vLLM, Docker or network. TRL and datasets travel as wheels in .whl/, made where PyPI is reachable:
#     bash images/gpu/memory_check.sh --prepare-wheels
# then there (one call, about 5 minutes):
#     bash images/gpu/colocate_check.sh
# and anywhere, to test the script: the committed tiny model, 3 steps, on the CPU
#     bash images/gpu/colocate_check.sh --dry-run
#
# Variants, each a `grpolab lab` in a process of its own (smoke test skipped), interleaved over the rounds:
#   inprocess                  the lab as it runs
#   inprocess-ranks            RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 (and MASTER_ADDR, MASTER_PORT) set before the run, as TRL's docs have a single-GPU
#                              colocate user do: on a GPU accelerate does not wrap the model at world size 1; on a
#                              CPU it wraps it in DDP (what made colocate's update slower on the CPU, issue 29)
#   inprocess-ranks-auto       the same with find_unused_parameters left to transformers
#                              (GRPOLAB_DDP_FIND_UNUSED_PARAMETERS=auto: False with gradient checkpointing on, the
#                              GPU tracks' setting; True without, the CPU's)
#   vllm-colocate[-ranks[-auto]]   the same three with vLLM colocate, only where vLLM is installed: the device machine
#                              lent to this project has none, and the script says so and runs the in-process ones
# Model: a random Qwen3-0.6B-shaped folder (`python -m grpolab.bench shape-folder`), bf16 on the GPU, with the CPU
# bench's settings (2 prompts x 4 completions of up to 32 tokens, 6 steps; steps 2-6 compared).
# PASS/FAIL lines; exit status: the number of failures. Logs and one JSON line per run in $OUT (or runs/colocate-check).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" colocate-check
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
use_carried_wheels

SETTINGS=(--num-generations 4 --per-device-train-batch-size 8 --max-completion-length 32 --logging-steps 1 --train-size 16 --heldout-size 1 --seed 0 --smoke never)
if [[ "${1:-}" == "--dry-run" ]]; then
  DEVICE=cpu; ROUNDS=1; STEPS=3; MODEL=tiny
else
  [[ "$(gpu_count python3)" -ge 1 ]] || { echo "FAIL  no CUDA GPU visible to torch (use --dry-run to test the script on a CPU)"; exit 1; }
  DEVICE=cuda; ROUNDS=2; STEPS=6; MODEL="$LOGS/qwen3-0.6b-shape"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
fi
python3 -c 'import torch, transformers, peft, accelerate, trl; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__, "accelerate", accelerate.__version__, "trl", trl.__version__)' \
  || { echo "FAIL  the lab's libraries do not import"; exit 1; }

VARIANTS=(inprocess inprocess-ranks inprocess-ranks-auto)
if python3 -c 'import vllm' >/dev/null 2>&1; then
  VARIANTS+=(vllm-colocate vllm-colocate-ranks vllm-colocate-ranks-auto)
  TRACK=n; [[ "$DEVICE" == cpu ]] && TRACK=cv
else
  echo "NOTE  vLLM is not installed here, so the colocate variants cannot run on this machine: in-process only, with and without the rank variables and the DDP setting"
  TRACK=n; [[ "$DEVICE" == cpu ]] && TRACK=c
fi
if [[ "$MODEL" != tiny && ! -f "$MODEL/config.json" ]]; then
  python3 -m grpolab.bench shape-folder --case qwen3-0.6b-shape --out "$MODEL" >"$LOGS/shape-folder.txt" 2>&1 \
    || { echo "FAIL  writing the Qwen3-0.6B-shaped folder: $(tail -3 "$LOGS/shape-folder.txt")"; exit 1; }
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
: >"$LOGS/runs.jsonl"
for round in $(seq "$ROUNDS"); do
  for variant in "${VARIANTS[@]}"; do
    rollout=inprocess; [[ "$variant" == vllm-colocate* ]] && rollout=vllm-colocate
    env_vars=(GRPOLAB_RUNS_DIR="$LOGS/runs-$variant-$round")
    [[ "$variant" == *-ranks* ]] && env_vars+=(RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)")
    [[ "$variant" == *-auto ]] && env_vars+=(GRPOLAB_DDP_FIND_UNUSED_PARAMETERS=auto)
    if env "${env_vars[@]}" timeout 420 python3 -m grpolab lab --track "$TRACK" --model "$MODEL" --rollout "$rollout" --max-steps "$STEPS" "${SETTINGS[@]}" \
        >"$LOGS/$variant-$round.txt" 2>&1; then
      python3 - "$LOGS/runs-$variant-$round/runlog.jsonl" "$variant" "$round" >>"$LOGS/runs.jsonl" <<'EOF'
import json, sys
lab = [json.loads(line) for line in open(sys.argv[1]) if line.strip()][-1]
steady = [s for s in lab["steps"] if s["step"] >= 2] or lab["steps"]
parts = ("generation", "weight_sync", "sync_check", "old_logprobs", "reward", "update")
print(json.dumps({"variant": sys.argv[2], "round": int(sys.argv[3]), "wrapper": lab.get("trainer_model_wrapper"),
                  "seconds_per_step": round(sum(s["seconds"] for s in steady) / len(steady), 4),
                  "split": {p: round(sum(s.get(f"{p}_s", 0.0) for s in steady) / len(steady), 4) for p in parts},
                  "peak_memory_gb_measured": lab.get("peak_memory_gb_measured"), "peak_memory_gb_predicted": lab.get("peak_memory_gb_predicted")}))
EOF
      echo "round $round  $variant  $(tail -1 "$LOGS/runs.jsonl")"
    else
      fail "$variant, round $round: $(tail -5 "$LOGS/$variant-$round.txt")"
    fi
  done
done

python3 - "$LOGS/runs.jsonl" "$DEVICE" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
device, failures = sys.argv[2], 0
parts = ("generation", "weight_sync", "sync_check", "old_logprobs", "reward", "update")
median, wrapper = {}, {}
for variant in dict.fromkeys(r["variant"] for r in runs):
    mine = [r for r in runs if r["variant"] == variant]
    median[variant] = {"seconds_per_step": statistics.median(r["seconds_per_step"] for r in mine), **{p: statistics.median(r["split"][p] for r in mine) for p in parts}}
    wrapper[variant] = mine[-1]["wrapper"]
    print(f"  {variant:<26} {median[variant]['seconds_per_step']:.4f} s/step  " + "  ".join(f"{p} {median[variant][p]:.4f}" for p in parts) + f"  wrapper: {wrapper[variant]}")
# The wrapper at world size 1: none on a GPU (accelerate wraps MULTI_GPU only for several processes); DDP on a CPU
# once LOCAL_RANK is set (accelerate's MULTI_CPU), with the lab's find_unused_parameters=False unless left to transformers.
expected = {"inprocess": "none",
            "inprocess-ranks": "none" if device == "cuda" else "DistributedDataParallel (find_unused_parameters=False)",
            "inprocess-ranks-auto": "none" if device == "cuda" else "DistributedDataParallel (find_unused_parameters=True)"}
for variant, want in expected.items():
    if variant not in wrapper:
        continue
    if wrapper[variant] == want:
        print(f"PASS  {variant} on {device}: the trainer's wrapper is {want}")
    else:
        print(f"FAIL  {variant} on {device}: the trainer's wrapper is {wrapper[variant]}, expected {want}")
        failures += 1
if "vllm-colocate" in median and "inprocess" in median:
    ratio = median["vllm-colocate"]["update"] / median["inprocess"]["update"]
    line = f"colocate's update / in-process's {ratio:.3f}; per step {median['vllm-colocate']['seconds_per_step'] / median['inprocess']['seconds_per_step']:.3f}"
    if device == "cpu" or abs(ratio - 1) <= 0.10:
        print(f"PASS  {line}" + (" (the 10% target is the GPU's)" if device == "cpu" else ""))
    else:
        print(f"FAIL  {line}: more than 10% apart")
        failures += 1
sys.exit(failures)
EOF
FAILURES=$((FAILURES + $?))
exit "$FAILURES"

#!/usr/bin/env bash
# The vLLM rollout paths on a real GPU, in one short run (at most ~10 minutes on one GPU).
#
# What it expects (the GPU machine has no network and no Docker):
#   - run from the repository root, in a Python environment holding the track's lock: torch (CUDA), trl 1.16.0,
#     peft, transformers, and vLLM inside TRL's declared range (check 1 refuses anything else);
#   - a small model on local disk: GRPOLAB_GPU_MODEL=/path/to/Qwen3-0.6B (a saved HF folder), else the
#     built-in tiny model, committed in entrypoint/tiny-model/ (its hashes checked: `python -m grpolab tiny-model`);
#   - one GPU or more. With one GPU, server mode *training* is refused by design (the server and the trainer
#     need separate devices; the refusal itself is checked), and the server path is checked up to generation:
#     health, version against TRL's range, the weight-transfer engine, and token ids + logprobs in responses.
#     With two GPUs, a short `lab --rollout vllm-server` run (trainer on GPU 0, it sees both) streams weights to a
#     server on GPU 1.
#
# Checks, in order (each prints PASS/FAIL; the script's exit status is the number of failures):
#   1. vLLM's version is inside TRL's declared range (grpolab doctor's rule).
#   2. smoke test with --rollout vllm-colocate (10 steps; vllm_gpu_memory_utilization chosen from the estimate).
#   3. `grpolab serve` (vllm serve with TRL's flags) on GPU 1, or on GPU 0 at a small memory fraction; wait_for_vllm_server
#      passes, the served model included.
#   4. TRL's VLLMClient.generate with prompt token ids gets token ids and logprobs back (the response shape).
#   5. two GPUs: lab --rollout vllm-server for 5 steps; one GPU: the refusal of server mode is the expected one.
# Logs: $OUT (or runs/gpu-check) holds vllm-serve.log, the run log and each check's output.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" gpu-check
export GRPOLAB_RUNS_DIR="$LOGS/runs" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
PORT="${GRPOLAB_GPU_PORT:-8011}"
URL="http://127.0.0.1:$PORT"
SERVER_PID=""
cleanup() { [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null; }
trap cleanup EXIT

GPUS="$(gpu_count python3)"
echo "GPUs: $GPUS; logs in $LOGS"
[[ "$GPUS" -ge 1 ]] || { echo "FAIL  no CUDA GPU visible to torch"; exit 1; }

if [[ -n "${GRPOLAB_GPU_MODEL:-}" ]]; then
  MODEL="$GRPOLAB_GPU_MODEL"
else
  MODEL="$(timeout 300 python3 -c 'from grpolab.model.tiny import verify_tiny_model; print(verify_tiny_model())' 2>"$LOGS/tiny-model.log")" \
    || { echo "FAIL  the committed tiny model is missing or changed (see $LOGS/tiny-model.log)"; exit 1; }
fi
echo "model: $MODEL"

# 1. vLLM inside TRL's declared range.
if timeout 120 python3 - >"$LOGS/1-version.txt" 2>&1 <<'EOF'
from grpolab.rollouts import check_vllm_version, installed_vllm_version
print(check_vllm_version(installed_vllm_version()))
EOF
then pass "1 $(tail -1 "$LOGS/1-version.txt")"; else fail "1 vLLM version: $(tail -3 "$LOGS/1-version.txt")"; fi

# 2. The smoke test through vLLM colocate.
if timeout 240 python3 -m grpolab smoke --track n --expect-device cuda --model "$MODEL" --rollout vllm-colocate \
     --max-completion-length 16 >"$LOGS/2-smoke-colocate.txt" 2>&1
then pass "2 smoke --rollout vllm-colocate: $(grep -m1 -i 'vllm_gpu_memory_utilization' "$LOGS/2-smoke-colocate.txt" | cut -c1-160)"
else fail "2 smoke --rollout vllm-colocate (exit $?): $(tail -5 "$LOGS/2-smoke-colocate.txt")"; fi

# 3. A vLLM server with the flags TRL needs.
if [[ "$GPUS" -ge 2 ]]; then SERVER_GPU=1; FRACTION=0.5; else SERVER_GPU=0; FRACTION=0.2; fi
python3 -m grpolab serve --track n --model "$MODEL" --gpu "$SERVER_GPU" --host 127.0.0.1 --port "$PORT" \
  --gpu-memory-utilization "$FRACTION" --max-prompt-length 128 --max-completion-length 128 -- --enforce-eager \
  >"$LOGS/vllm-serve.log" 2>&1 &
SERVER_PID=$!
if timeout 200 python3 - "$URL" "$MODEL" >"$LOGS/3-server.txt" 2>&1 <<'EOF'
import sys
from grpolab.rollouts import wait_for_vllm_server
print(wait_for_vllm_server(sys.argv[1], timeout_s=180, model=sys.argv[2]))
EOF
then pass "3 vllm serve ready: $(tail -1 "$LOGS/3-server.txt")"; else fail "3 vllm serve: $(tail -3 "$LOGS/3-server.txt") (server log: $LOGS/vllm-serve.log)"; fi

# 4. The response shape, through TRL's own client: token ids in, token ids and logprobs out.
if timeout 90 python3 - "$URL" "$MODEL" >"$LOGS/4-shape.txt" 2>&1 <<'EOF'
import sys
from transformers import AutoTokenizer
from trl.generation.vllm_client import VLLMClient
url, model = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(model)
ids = tok.apply_chat_template([{"role": "user", "content": "What is 2 plus 3?"}], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
out = VLLMClient(base_url=url, connection_timeout=30).generate(prompts=[ids], n=4, max_tokens=8, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, logprobs=0)
assert out["prompt_ids"][0] == ids, "the server tokenised differently"
assert len(out["completion_ids"]) == 4 and all(isinstance(t, int) for c in out["completion_ids"] for t in c), "no token ids"
assert all(len(lp) == len(c) for lp, c in zip(out["logprobs"], out["completion_ids"])), "logprobs do not line up with tokens"
print(f"4 completions, e.g. {out['completion_ids'][0]} -> {tok.decode(out['completion_ids'][0])!r}")
EOF
then pass "4 TRL's VLLMClient gets token ids and logprobs: $(tail -1 "$LOGS/4-shape.txt")"; else fail "4 response shape: $(tail -3 "$LOGS/4-shape.txt")"; fi

# 5. Server-mode training (two GPUs) or its refusal (one GPU).
if [[ "$GPUS" -ge 2 ]]; then
  if timeout 240 python3 -m grpolab lab --track n --smoke never --model "$MODEL" --rollout vllm-server \
       --vllm-server-url "$URL" --max-steps 5 --train-size 40 --heldout-size 20 --max-completion-length 16 >"$LOGS/5-lab-server.txt" 2>&1
  then pass "5 lab --rollout vllm-server, 5 steps with weights streamed to the server"
  else fail "5 lab --rollout vllm-server (exit $?): $(tail -5 "$LOGS/5-lab-server.txt")"; fi
else
  timeout 120 python3 -m grpolab smoke --track n --expect-device cuda --model "$MODEL" --rollout vllm-server \
    --vllm-server-url "$URL" >"$LOGS/5-refusal.txt" 2>&1
  status=$?
  if [[ $status -eq 14 ]] && grep -q "second GPU" "$LOGS/5-refusal.txt"
  then pass "5 one GPU: server-mode training refused with exit 14, suggesting colocate"
  else fail "5 expected the one-GPU refusal (exit 14), got exit $status: $(tail -3 "$LOGS/5-refusal.txt")"; fi
fi

echo "failures: $FAILURES"
exit "$FAILURES"

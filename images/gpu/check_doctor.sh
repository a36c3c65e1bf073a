#!/usr/bin/env bash
# The doctor (--json and the short form) and the smoke test's device layer on a real NVIDIA GPU, in about a
# minute. For a bare x86 CUDA machine without network, Docker, TRL or datasets: it needs python3 with a CUDA
# torch, and jsonschema to validate the JSON (carried as wheels where missing: jsonschema,
# jsonschema-specifications, referencing, rpds-py; see the device notes). Run from the repository root.
#
# Checks (each prints PASS or FAIL; the exit status is the number of failures):
#   1. `grpolab doctor --json` validates against entrypoint/grpolab/environment/doctor.schema.json.
#   2. the CUDA items (gpu driver, gpus, torch, device, arch) and the fingerprint agree with what torch and
#      nvidia-smi report on this machine (check_doctor.py); e.g. an H200 is sm_90, native in a cu130 wheel.
#   3. the short form has one line per item.
#   4. the smoke test's device layer (check_device) passes with the doctor's device line, and its kernels line
#      where the image has a kernels table.
# Logs and recordings in $OUT (or runs/gpu-doctor): doctor.json, doctor.txt, doctor-v.txt, and nvidia-smi's
# outputs, which tests/test_doctor.py can take as recorded fixtures.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" gpu-doctor
export GRPOLAB_RUNS_DIR="$LOGS/runs" GRPOLAB_TRACK="${GRPOLAB_GPU_TRACK:-n}"
GPUS="$(gpu_count python3)"
echo "GPUs: $GPUS; track $GRPOLAB_TRACK; logs in $LOGS"
[[ "$GPUS" -ge 1 ]] || { echo "FAIL  no CUDA GPU visible to torch"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free,compute_cap --format=csv,noheader,nounits >"$LOGS/nvidia-smi-query.txt" 2>&1
nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1

timeout 120 python3 -m grpolab doctor --json >"$LOGS/doctor.json" 2>"$LOGS/doctor-json.err"
timeout 120 python3 -m grpolab doctor >"$LOGS/doctor.txt" 2>&1
timeout 120 python3 -m grpolab doctor -v >"$LOGS/doctor-v.txt" 2>&1
cat "$LOGS/doctor.txt"

if python3 - "$LOGS/doctor.json" <<'PY' >"$LOGS/1-schema.txt" 2>&1
import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[1])), json.load(open("entrypoint/grpolab/environment/doctor.schema.json")))
print("valid")
PY
then pass "1 doctor --json validates against doctor.schema.json"; else fail "1 schema: $(tail -3 "$LOGS/1-schema.txt")"; fi

if python3 images/gpu/check_doctor.py "$LOGS/doctor.json" >"$LOGS/2-cuda-items.txt" 2>&1
then pass "2 $(tail -1 "$LOGS/2-cuda-items.txt" | cut -c7-)"; else fail "2 CUDA items: $(grep FAIL "$LOGS/2-cuda-items.txt" | head -5)"; fi

items="$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["items"]))' "$LOGS/doctor.json" 2>/dev/null || echo 0)"
lines="$(grep -cE '^  \[(ok  |warn|FAIL)\] ' "$LOGS/doctor.txt")"
if [[ "$items" -gt 0 && "$items" == "$lines" ]]; then pass "3 short form: $lines lines for $items items"; else fail "3 short form: $lines lines for $items items"; fi

if timeout 120 python3 - "$LOGS/doctor.json" <<'PY' >"$LOGS/4-device-layer.txt" 2>&1
import json, sys
from grpolab.run.checks import check_device
from grpolab.common.tracks import current_track_name, get_track
device, line = check_device(get_track(current_track_name()))
items = {i["name"]: i["summary"] for i in json.load(open(sys.argv[1]))["items"]}
# The smoke test's line is the doctor's device item, then on a GPU "; kernels: " and the doctor's kernels item.
device_part, _, kernels_part = line.partition("; kernels: ")
print(line)
sys.exit(0 if device == "cuda" and device_part == items["device"] and kernels_part in ("", items.get("kernels")) else 1)
PY
then pass "4 smoke device layer: $(tail -1 "$LOGS/4-device-layer.txt")"; else fail "4 smoke device layer: $(tail -3 "$LOGS/4-device-layer.txt")"; fi
exit "$FAILURES"

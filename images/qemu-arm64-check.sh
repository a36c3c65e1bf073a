#!/usr/bin/env bash
# Track s (DGX Spark) is linux/arm64. Where there is no arm64 machine, build its image under QEMU user
# emulation on the arm64 stand-in base and import torch, trl and vllm inside it. Slow (emulated): ~15+ min
# on 2 cores, most of it installing the lock. Run as root from anywhere in the repository:
#   nice -n 10 bash images/qemu-arm64-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
log() { echo "[qemu-arm64 $(( $(date +%s) - started ))s] $*"; }

# 1. QEMU user emulation for aarch64 binaries (binfmt_misc), once per machine.
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    log "installing qemu-user-static + binfmt-support"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >/dev/null
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    update-binfmts --enable qemu-aarch64
fi

# 2. The arm64 stand-in base (mmdebstrap, maintainer scripts under QEMU), from its pins: made first when they are not
#    committed (lockfiles/base-trixie-arm64.debian.txt; `invoke lock.base --arch arm64` makes the base once to read them).
log "stand-in base"
[ -e lockfiles/base-trixie-arm64.debian.txt ] || invoke lock.base --arch arm64
invoke base --arch arm64

# 3. The image, for linux/arm64. No GPU here (skip the host check), and .env left alone.
log "build track s"
invoke build --track s --base grpolab-base:trixie-arm64 --skip-host-check --no-record

# 4. Import the stack. oneDNN's CPU probe reads /sys/devices/system/cpu/cpu*/regs/identification/midr_el1,
#    which QEMU's user mode lacks (torch segfaults on import): mount a stand-in folder there (Neoverse-V2).
cpu=$(mktemp -d)
for n in 0 1; do
    mkdir -p "$cpu/cpu$n/regs/identification"
    echo 0x00000000410fd4f0 > "$cpu/cpu$n/regs/identification/midr_el1"
done
for f in online possible present; do echo 0-1 > "$cpu/$f"; done
chmod -R a+rX "$cpu"  # mktemp makes it 0700; the image runs as uid 1000
log "import torch, trl, vllm in grpolab:s"
docker run --rm --platform linux/arm64 -v "$cpu:/sys/devices/system/cpu:ro" grpolab:s shell -c \
    'uname -m; python -c "import torch, trl, vllm, peft, transformers; print(\"torch\", torch.__version__, \"trl\", trl.__version__, \"vllm\", vllm.__version__)"'
rm -rf "$cpu"
log "done: track s builds for linux/arm64 and imports torch, trl, vllm"
